"""Helpers for the end-to-end tests: a real `sluicegate serve` process, SSE parsing, metrics.

Kept out of conftest.py so test modules can import them by name (`from e2e_support import ...`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

SCRIPTS = Path(__file__).parent / "scripts"
STARTUP_TIMEOUT = (
    60.0  # an upper bound on a server start (a loaded 2-core machine is slow), never a pass condition
)
STOP_TIMEOUT = 5.0

# The exact text of the scripts, for assertions (kept next to the scripts they mirror).
DEFAULT_REPLY = "Hello! This is a deterministic scripted reply from Sluicegate."
THINK_REASONING = "Let me think about this step by step."
THINK_CONTENT = "The answer is 42."
WEATHER_REASONING = "The user wants the weather; call the tool."
REFUSAL = "I'm sorry, but I cannot help with that request."
FAIL_CONTENT_WORDS = ["This", " will", " break"]  # error_after_deltas: 3
FAIL_MESSAGE = "scripted engine exploded"
SLOW_WORDS = 400

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


def write_config(
    folder: Path,
    server: dict[str, Any],
    models: list[dict[str, Any]],
    tables: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """A TOML config in `folder`, with the e2e scripts copied beside it (relative `script` paths).

    `tables` adds other top-level tables, e.g. {"chat_completions": {"reasoning_field": "both"}}.
    """
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SCRIPTS, folder / "scripts", dirs_exist_ok=True)
    lines = ["[server]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in server.items()]
    for name, table in (tables or {}).items():
        lines += ["", f"[{name}]"]
        lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in table.items()]
    for model in models:
        lines += ["", "[[models]]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in model.items()]
    path = folder / "sluicegate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def scripted(model_id: str, script: str) -> dict[str, Any]:
    return {"id": model_id, "engine": "scripted", "script": f"scripts/{script}"}


def server_env(folder: Path) -> dict[str, str]:
    """The environment without any SLUICEGATE_* setting of the developer's, data kept in `folder`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    env["XDG_DATA_HOME"] = str(folder / "xdg-data")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path
    stdout_path: Path

    @property
    def api_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def folder(self) -> Path:
        """The folder it runs in: its working directory, config and output files."""
        return self.stdout_path.parent

    def output(self) -> str:
        return (
            self.stdout_path.read_text(errors="replace")
            + "\n--- stderr ---\n"
            + self.stderr_path.read_text(errors="replace")
        )


@contextlib.contextmanager
def run_server(
    folder: Path,
    config: Path | None,
    *,
    startup_timeout: float = STARTUP_TIMEOUT,
    stop_timeout: float = STOP_TIMEOUT,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """Start `python -m sluicegate serve`, wait for /health, stop it afterwards.

    `env` adds variables to its environment (e.g. `HF_ENDPOINT` for a fake Hub).
    """
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [sys.executable, "-m", "sluicegate", "serve", "--port", str(port)]
    if config is not None:
        command += ["--config", str(config)]
    stdout_path, stderr_path = folder / "server.stdout", folder / "server.stderr"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            command, stdout=out, stderr=err, cwd=folder, env=server_env(folder) | (env or {})
        )
    server = Server(f"http://127.0.0.1:{port}", process, stderr_path, stdout_path)
    try:
        _wait_healthy(server, startup_timeout)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(stop_timeout)


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"sluicegate exited with {server.process.returncode} while starting:\n{server.output()}"
            )
        try:
            if httpx.get(server.base_url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sluicegate did not become healthy in {timeout}s:\n{server.output()}")


# --- SSE ---------------------------------------------------------------------------------


@dataclass
class Frame:
    """One SSE block: its `event:` name, its `data:` text, and any comment lines."""

    event: str | None = None
    data: str | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def is_heartbeat(self) -> bool:
        return self.comments == [" heartbeat"] and self.event is None and self.data is None

    @property
    def is_done(self) -> bool:
        return self.event is None and self.data == "[DONE]" and not self.comments

    def json(self) -> Any:
        assert self.data is not None
        return json.loads(self.data)


def parse_sse(text: str) -> list[Frame]:
    """Split an event stream into frames, strictly: every frame must end with a blank line."""
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    frames = []
    for block in text[:-2].split("\n\n"):
        frame = Frame()
        for line in block.split("\n"):
            if line.startswith(":"):
                frame.comments.append(line[1:])
            elif line.startswith("event: "):
                assert frame.event is None, f"two event lines in one frame: {block!r}"
                frame.event = line[len("event: ") :]
            elif line.startswith("data: "):
                assert frame.data is None, f"multi-line data is not expected here: {block!r}"
                frame.data = line[len("data: ") :]
            else:
                raise AssertionError(f"unexpected SSE line {line!r} in {block!r}")
        frames.append(frame)
    return frames


def events_of(frames: list[Frame]) -> list[dict[str, Any]]:
    """The JSON events of a named-event stream (Responses), checking `event:` == `data.type` on each."""
    events = []
    for frame in frames:
        if frame.is_heartbeat or frame.is_done:
            continue
        assert frame.event is not None and frame.data is not None, frame
        assert not frame.comments, frame
        event = json.loads(frame.data)
        assert event["type"] == frame.event, (frame.event, event["type"])
        events.append(event)
    return events


@dataclass
class RawStream:
    response: httpx.Response
    text: str
    frames: list[Frame]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON of every plain data frame (not errors, not [DONE])."""
        return [f.json() for f in self.frames if f.data is not None and f.event is None and not f.is_done]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The JSON of every named event (a Responses stream), see `events_of`."""
        return events_of(self.frames)


def stream_raw(
    base_url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    path: str = "/v1/chat/completions",
) -> RawStream:
    """Send a streaming request (POST `body`, or a bodiless GET) and read the whole event stream as text."""
    with (
        httpx.Client(base_url=base_url, timeout=30.0) as client,
        client.stream(method, path, json=body if method == "POST" else None, headers=headers) as response,
    ):
        assert response.status_code == 200, response.read()
        text = b"".join(response.iter_raw()).decode()
    return RawStream(response, text, parse_sse(text))


def chat_body(model: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


# --- metrics -------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def read_metrics(base_url: str) -> dict[tuple[str, str], float]:
    """Prometheus text → {(name, 'model') or (name, ''): value} for model-labelled samples."""
    text = httpx.get(base_url + "/metrics", timeout=5.0).text
    samples: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"unparseable metrics line {line!r}"
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        if set(labels) <= {"model"}:
            samples[(match["name"], labels.get("model", ""))] = float(match["value"])
    return samples


def metric(base_url: str, name: str, model: str) -> float:
    return read_metrics(base_url).get((name, model), 0.0)


def poll(check: Callable[[], T], timeout: float, interval: float = 0.02, *, fail: bool = False) -> T:
    """Call `check` until it returns something truthy, which is returned.

    When `timeout` passes first, its last (falsy) value is returned, or with `fail` the test fails.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            if fail:
                raise AssertionError(f"condition not met within {timeout}s (last value: {result!r})")
            return result
        time.sleep(interval)


def engine_window(base_url: str, model: str, deltas: int, prompt: str = "go") -> None:
    """Stream `deltas` text deltas of a paced scripted `model`, then hang up.

    A window of engine time measured in the engine's own steps, not the wall clock: "a cancelled
    engine produced nothing more" is checked over the time an engine of the same pace took to
    produce `deltas` deltas on this machine, however slow the machine is.
    """
    body = chat_body(model, prompt, stream=True)
    with (
        httpx.Client(base_url=base_url, timeout=30.0) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200, response.read()
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data: {") and json.loads(line[len("data: ") :])["choices"][0]["delta"].get(
                "content"
            ):
                seen += 1
                if seen >= deltas:
                    return
    raise AssertionError(f"{model} ended after {seen} deltas, before {deltas}")


def assert_openai_error(
    response: httpx.Response, status: int, *, param: str | None, **expected: Any
) -> dict[str, Any]:
    """The body is exactly {"error": {"message", "type", "param", "code"}} with these values."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert "Traceback" not in error["message"]
    assert error["param"] == param, error
    for key, value in expected.items():
        assert error[key] == value, (key, error)
    return error
