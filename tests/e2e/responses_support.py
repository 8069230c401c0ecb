"""Helpers for the Responses end-to-end tests: a real server process, SSE parsing, the schema.

Self-contained on purpose (the Chat Completions helpers write no `[responses]` table): each
server gets its own folder, config and data directory, and is terminated when its `with` ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import referencing
import referencing.jsonschema

SCRIPTS = Path(__file__).parent / "scripts"
REPO = Path(__file__).resolve().parents[2]
SCHEMA_NAME = "open-responses-openapi.json"
# Where the Open Responses schema may be: named by the environment, beside this file, or in the
# shared specs next to (or inside) the checkout, as the issue refers to it.
SCHEMA_CANDIDATES = [
    *([Path(os.environ["OPEN_RESPONSES_SCHEMA"])] if os.environ.get("OPEN_RESPONSES_SCHEMA") else []),
    Path(__file__).parent / SCHEMA_NAME,
    REPO.parent / "shared" / "specs" / SCHEMA_NAME,
    REPO / "shared" / "specs" / SCHEMA_NAME,
]
STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0

# The exact text of scripts/responses.yaml, for assertions.
HELLO = "Hello! This is a deterministic scripted Responses reply."
HELLO_WORDS = ["Hello!", " This", " is", " a", " deterministic", " scripted", " Responses", " reply."]
THINK_REASONING = "Let me think about this step by step."
THINK_CONTENT = "The answer is 42."
REFUSAL = "I'm sorry, but I cannot help with that request."
WEATHER_REASONING = "The user wants the weather; call the tool."
WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
TOOL_ANSWER = "It is sunny in Paris, 22 degrees."
FAIL_MESSAGE = "scripted engine exploded"
AGENT_REASONING = "I should call the weather tool."
AGENT_FINAL = "The agent checked: it is sunny in Paris."
AGENT_THANKS = "You are welcome, says the agent."
# scripts/responses_slow.yaml
STROLL_WORDS = 40  # "stroll": 40 words, 40 ms apart
CRAWL_WORDS = 300  # "crawl": 300 words, 50 ms apart
LATE_ANSWER = "Finally, an answer."  # "late": 1.5 s before the first token


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    raise TypeError(f"cannot write {value!r} as TOML")


def write_config(
    folder: Path,
    *,
    server: dict[str, Any] | None = None,
    responses: dict[str, Any] | None = None,
    models: dict[str, str],
) -> Path:
    """A config in `folder` with its own data_dir; `models` maps model id → script file name."""
    shutil.copytree(SCRIPTS, folder / "scripts", dirs_exist_ok=True)
    lines = ["[server]", f"data_dir = {_toml(str(folder / 'data'))}"]
    lines += [f"{key} = {_toml(value)}" for key, value in (server or {}).items()]
    if responses:
        lines += ["", "[responses]", *(f"{key} = {_toml(value)}" for key, value in responses.items())]
    for model_id, script in models.items():
        lines += ["", "[[models]]", f"id = {_toml(model_id)}", 'engine = "scripted"']
        lines.append(f"script = {_toml('scripts/' + script)}")
    path = folder / "sluicegate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class Server:
    base_url: str
    folder: Path
    process: subprocess.Popen[bytes]
    responses: dict[str, Any] = field(default_factory=dict)  # its [responses] settings

    @property
    def api_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def store_file(self) -> Path:
        return self.folder / "data" / "sluicegate.sqlite3"

    def log(self) -> str:
        return (self.folder / "server.log").read_text(errors="replace")


@contextlib.contextmanager
def running_server(
    folder: Path,
    *,
    server: dict[str, Any] | None = None,
    responses: dict[str, Any] | None = None,
    models: dict[str, str],
) -> Iterator[Server]:
    """`python -m sluicegate serve` with this config; waits for /health, terminates at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(folder, server=server, responses=responses, models=models)
    port = free_port()
    command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    with open(folder / "server.log", "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder, env=env)
    handle = Server(f"http://127.0.0.1:{port}", folder, process, dict(responses or {}))
    try:
        _wait_healthy(handle)
        yield handle
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"sluicegate exited with {server.process.returncode}:\n{server.log()}")
        try:
            if httpx.get(server.base_url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sluicegate did not become healthy in {STARTUP_TIMEOUT}s:\n{server.log()}")


def poll(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Call `check` until it returns something truthy (returned) or `timeout` passes (fails)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {result!r})")
        time.sleep(interval)


# --- SSE --------------------------------------------------------------------------------


@dataclass
class Frame:
    event: str | None = None
    data: str | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def is_heartbeat(self) -> bool:
        return self.comments == [" heartbeat"] and self.event is None and self.data is None

    @property
    def is_done(self) -> bool:
        return self.event is None and self.data == "[DONE]" and not self.comments


def parse_sse(text: str) -> list[Frame]:
    """Strict parse: every block ends with a blank line; only `event:`, `data:` and comments."""
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
                assert frame.data is None, f"two data lines in one frame: {block!r}"
                frame.data = line[len("data: ") :]
            else:
                raise AssertionError(f"unexpected SSE line {line!r} in {block!r}")
        frames.append(frame)
    return frames


def events_of(frames: list[Frame]) -> list[dict[str, Any]]:
    """The JSON events of a Responses stream, checking `event:` == `data.type` on every frame."""
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
    status: int
    headers: httpx.Headers
    text: str
    frames: list[Frame]

    @property
    def events(self) -> list[dict[str, Any]]:
        return events_of(self.frames)


def stream_raw(
    base_url: str, body: dict[str, Any], *, method: str = "POST", path: str = "/v1/responses"
) -> RawStream:
    """One whole Responses event stream, as text and as parsed frames."""
    with (
        httpx.Client(base_url=base_url, timeout=30.0) as client,
        client.stream(method, path, json=body if method == "POST" else None) as response,
    ):
        text = b"".join(response.iter_raw()).decode()
        status, headers = response.status_code, response.headers
    assert status == 200, text
    return RawStream(status, headers, text, parse_sse(text))


def assert_openai_error(
    response: httpx.Response,
    status: int,
    *,
    param: str | None = None,
    code: str | None = None,
    **expected: Any,
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
    assert error["code"] == code, error
    for key, value in expected.items():
        assert error[key] == value, (key, error)
    return error


# --- the Open Responses schema ----------------------------------------------------------

OPENAI_REASONING_NAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}
_BASE = "urn:open-responses"


@cache
def _schema() -> tuple[referencing.Registry[Any], dict[str, str]]:
    found = [path for path in SCHEMA_CANDIDATES if path.is_file()]
    assert found, f"the Open Responses schema is in none of {[str(p) for p in SCHEMA_CANDIDATES]}"
    document = json.loads(found[0].read_text(encoding="utf-8"))
    resource = referencing.Resource.from_contents(
        document, default_specification=referencing.jsonschema.DRAFT202012
    )
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(_BASE, resource)
    by_type = {}
    for name, schema in document["components"]["schemas"].items():
        if name.endswith("StreamingEvent"):
            (kind,) = schema["properties"]["type"]["enum"]
            by_type[kind] = name
    return registry, by_type


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    registry, _ = _schema()
    return jsonschema.Draft202012Validator({"$ref": f"{_BASE}#/components/schemas/{name}"}, registry=registry)


def schema_errors(name: str, instance: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in _validator(name).iter_errors(instance)
    ]


def validate_schema(name: str, instance: Any) -> None:
    errors = schema_errors(name, instance)
    assert not errors, f"{name} rejects {json.dumps(instance)[:2000]}:\n" + "\n".join(errors)


def validate_event(event: dict[str, Any], *, rename_openai_reasoning: bool = True) -> None:
    """Validate one streamed event against `<Name>StreamingEvent`, chosen by its type.

    With `rename_openai_reasoning`, OpenAI's `response.reasoning_text.*` names are mapped to the
    Open Responses `response.reasoning.*` first (the payloads are the same); without it, every
    event must validate exactly as sent.
    """
    _, by_type = _schema()
    kind = event["type"]
    if rename_openai_reasoning and kind in OPENAI_REASONING_NAMES:
        event = {**event, "type": OPENAI_REASONING_NAMES[kind]}
        kind = event["type"]
    assert kind in by_type, f"the Open Responses schema has no event of type {kind!r}"
    validate_schema(by_type[kind], event)


def validate_response(response: dict[str, Any]) -> None:
    validate_schema("ResponseResource", response)
