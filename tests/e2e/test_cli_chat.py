"""`sluicegate chat` in a real terminal (tmux): it streams answers, keeps the conversation,
takes multi-line input and commands, and Ctrl-C stops an answer — the server cancels the
generation (its metrics say so) — while the program keeps running until Ctrl-D."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_support import Server, poll, server_env
from playground_support import (
    API_KEY,
    ARTIFACTS,
    MODEL,
    NOTES_REPLY,
    PLAIN_REPLY,
    StartServer,
    start_playground_server,
)
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

if shutil.which("tmux") is None:
    pytest.skip("needs tmux (see .ci/run)", allow_module_level=True)

WAIT = 30.0  # an upper bound for waits, never a pass condition


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    return start_playground_server(start_server, tmp_path_factory.mktemp("chat"))


class Terminal:
    """One tmux session on a private socket, running a command."""

    def __init__(self, folder: Path, command: list[str]) -> None:
        self.socket = f"sluicegate-test-{uuid.uuid4().hex[:8]}"
        self.env = server_env(folder) | {"TERM": "xterm-256color", "HOME": str(folder)}
        shell = " ".join(f"'{part}'" for part in command) + "; echo EXITED $?; sleep 600"
        self.tmux("new-session", "-d", "-s", "chat", "-x", "200", "-y", "50", shell)

    def tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env, timeout=30
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "chat", "-S", "-1000")

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", text)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "chat", *keys)

    def wait_for(self, pattern: str, count: int = 1) -> str:
        """The screen once `pattern` (a regex) appears `count` times on it."""
        found = poll(lambda: len(re.findall(pattern, self.screen())) >= count, timeout=WAIT)
        screen = self.screen()
        assert found, f"{pattern!r} (x{count}) never appeared:\n{screen}"
        return screen

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, env=self.env)


@pytest.fixture
def terminal(server: Server, tmp_path: Path) -> Iterator[Terminal]:
    command = [
        sys.executable,
        "-m",
        "sluicegate",
        "chat",
        MODEL,
        "--url",
        server.base_url,
        "--api-key",
        API_KEY,
    ]
    term = Terminal(tmp_path, command)
    try:
        yield term
    finally:
        term.close()


def metric(server: Server, name: str) -> float:
    """A sample of the model's, read with the key (this server has one)."""
    text = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"model": MODEL}:
                return float(sample.value)
    return 0.0


def prompt_tokens(screen: str) -> list[int]:
    return [int(n) for n in re.findall(r"(\d+) in · \d+ out", screen)]


def test_a_session(server: Server, terminal: Terminal) -> None:
    terminal.wait_for(rf"Chatting with {MODEL}")
    terminal.type("Hello there")
    terminal.wait_for(re.escape(PLAIN_REPLY))
    screen = terminal.wait_for(r"\d+ in · \d+ out")
    assert "A plain question; no tool needed." in screen  # reasoning, shown (dimmed)

    # The conversation is kept: the second prompt is the first plus the answer and more.
    terminal.type("Hello again")
    screen = terminal.wait_for(r"\d+ in · \d+ out", count=2)
    first, second = prompt_tokens(screen)
    assert second > first

    # Multi-line input: a triple-quoted block, and a line continued by a backslash.
    terminal.type('"""')
    terminal.type("first line")
    terminal.type("crawl along")
    terminal.type('"""')
    terminal.wait_for(r"crawling 1 2 3")
    assert metric(server, "sluicegate_generations_active") == 1
    terminal.keys("C-c")  # stops the answer, not the program
    terminal.wait_for(r"\[stopped\]")
    poll(lambda: metric(server, "sluicegate_generations_active") == 0, timeout=WAIT, fail=True)
    assert metric(server, "sluicegate_generations_cancelled_total") == 1

    terminal.type("/reset")
    terminal.wait_for("new conversation")
    terminal.type("What do my \\")
    terminal.type("notes say?")  # the server runs read_file (files plugin), then answers
    terminal.wait_for(re.escape(NOTES_REPLY))
    terminal.type("/reset")
    terminal.type("Hello there")
    screen = terminal.wait_for(r"\d+ in · \d+ out", count=4)
    assert prompt_tokens(screen)[-1] == first  # a fresh conversation again

    terminal.type("/model no-such-model")
    terminal.type("Hello?")
    terminal.wait_for(r"\[404\] The model `no-such-model` does not exist")
    terminal.type(f"/model {MODEL}")

    terminal.keys("C-d")
    screen = terminal.wait_for(r"EXITED \d+")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "chat-session.txt").write_text(screen)
    assert "EXITED 0" in screen
    assert "Traceback" not in screen
