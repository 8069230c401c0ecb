"""The real Codex CLI (`@openai/codex` from npm), unchanged but for its model provider, against
Sluicegate with a scripted model: a shell round trip, an `apply_patch` edit that really changes
the file, reasoning shown as summaries; and a call cut off by a mid-stream failure not run.

Codex is pointed at Sluicegate the documented way: a `[model_providers.<id>]` table with
`wire_api = "responses"`, `base_url` and `env_key`, in a CODEX_HOME of the test's own. The model
id is one Codex knows (`gpt-5.5`), so it sends its real tool list: function tools, the free-form
`apply_patch` custom tool, `tool_search` (client) and `web_search` (hosted, left out here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from responses_support import Server, running_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("codex") is None,
        reason="the Codex CLI is not installed (npm install -g @openai/codex; .ci/run does it)",
    ),
]

MODEL = "gpt-5.5"  # a model Codex knows: it then offers apply_patch as a custom (free-form) tool
API_KEY = "sk-codex-e2e"
CODEX_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("codex-server"), server={"api_keys": [API_KEY]}, models={MODEL: "codex.yaml"}
    ) as s:
        yield s


def codex_home(folder: Path, server: Server) -> Path:
    home = folder / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'''model = "{MODEL}"
model_provider = "sluicegate"
model_reasoning_summary = "detailed"

[model_providers.sluicegate]
name = "Sluicegate"
base_url = "{server.api_url}"
env_key = "SLUICEGATE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
''',
        encoding="utf-8",
    )
    return home


def run_codex(
    folder: Path, server: Server, prompt: str
) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    work = folder / "work"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))},
        "CODEX_HOME": str(codex_home(folder, server)),
        "HOME": str(folder),
        "SLUICEGATE_API_KEY": API_KEY,
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        [
            "codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-C",
            str(work),
            prompt,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=CODEX_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    events = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return done, events


def items(events: list[Any], kind: str) -> list[Any]:
    return [e["item"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == kind]


def test_codex_runs_a_shell_round_trip_and_patches_a_file(tmp_path: Path, server: Server) -> None:
    (tmp_path / "work").mkdir()
    notes = tmp_path / "work" / "notes.txt"
    notes.write_text("old line\n", encoding="utf-8")
    done, events = run_codex(tmp_path, server, "codex-e2e: fix the notes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert notes.read_text(encoding="utf-8") == "new line\n"
    commands = items(events, "command_execution")
    assert any("cat notes.txt" in c["command"] and "old line" in c["aggregated_output"] for c in commands)
    assert items(events, "file_change"), events
    reasoning = [i["text"] for i in items(events, "reasoning")]
    assert any("read the notes first" in text for text in reasoning), reasoning
    messages = [i["text"] for i in items(events, "agent_message")]
    assert messages[-1] == "All done: notes.txt now says new line."


def test_codex_does_not_run_a_call_cut_off_by_a_failure(tmp_path: Path, server: Server) -> None:
    (tmp_path / "work").mkdir()
    done, events = run_codex(tmp_path, server, "codex-e2e: cut off")
    assert not (tmp_path / "work" / "cut.txt").exists()
    assert not items(events, "file_change")
    errors = [e for e in events if e.get("type") in ("error", "turn.failed")]
    assert errors, events
    assert done.returncode != 0
