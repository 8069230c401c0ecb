"""Helpers for the LM Studio REST v1 end-to-end tests.

Servers with an `[lmstudio]` table (the shared fixtures write none), the named-event stream of
`POST /api/v1/chat`, a state machine that rejects any event out of the documented order, the
per-event payload checks, and LM Studio's error shape. The references are
`specs/lmstudio-streaming-events.md` (current) and `specs/lmstudio-streaming-events-v0.md`.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from e2e_support import Server, parse_sse, run_server

SCRIPTS = Path(__file__).parent / "scripts"
Json = dict[str, Any]
Vocabulary = Literal["current", "v0"]

RESPONSE_ID = re.compile(r"^resp_[0-9a-f]{48}$")
ERROR_TYPES = {  # the documented `error.type` values
    "invalid_request",
    "unknown",
    "mcp_connection_error",
    "plugin_connection_error",
    "not_implemented",
    "model_not_found",
    "job_not_found",
    "internal_error",
}
TIMING_STATS = ("tokens_per_second", "time_to_first_token_seconds")

# The exact text of scripts/lmstudio_chat.yaml, for assertions.
HELLO = "Hello from the scripted LM Studio model."
THINK_REASONING = "Let me think about this step by step."
THINK_CONTENT = "The answer is 42."
BROWSER_REASONING = "The user wants a web page; call the browser tool."
BROWSER_ARGUMENTS = {"url": "https://lmstudio.ai"}
REFUSAL = "I'm sorry, but I cannot help with that request."
FAIL_WORDS = ["This", " will", " break"]  # error_after_deltas: 3
FAIL_MESSAGE = "scripted engine exploded"
GREETING = "Nice to meet you, Ada."
RECALL = "Your name is Ada, you told me before."
# scripts/lmstudio_jit.yaml
JIT_LOAD_SECONDS = 0.4
JIT_REASONING = "Loading finished, now thinking."
JIT_CONTENT = "Loaded and ready."


# --- servers -----------------------------------------------------------------------------


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and flat lists read the same in TOML


def write_config(
    folder: Path, *, models: list[Json], server: Json | None = None, lmstudio: Json | None = None
) -> Path:
    """A config with [server] (data kept in `folder`), [lmstudio] and models; scripts copied beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SCRIPTS, folder / "scripts", dirs_exist_ok=True)
    tables = {"server": {"data_dir": str(folder / "data"), **(server or {})}, "lmstudio": lmstudio or {}}
    lines: list[str] = []
    for name, table in tables.items():
        lines += [f"[{name}]", *(f"{key} = {_toml(value)}" for key, value in table.items()), ""]
    for model in models:
        lines += ["[[models]]", *(f"{key} = {_toml(value)}" for key, value in model.items()), ""]
    path = folder / "sluicegate.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def scripted(model_id: str, script: str) -> Json:
    return {"id": model_id, "engine": "scripted", "script": f"scripts/{script}"}


_servers: dict[str, tuple[Server, contextlib.ExitStack]] = {}


def _stop(name: str) -> None:
    _servers.pop(name)[1].close()  # run_server terminates the process


def shared_server(
    request: pytest.FixtureRequest,
    name: str,
    folder: Callable[[], Path],
    on_start: Callable[[Server], None] = lambda server: None,
    **config: Any,
) -> Server:
    """One server per name for the whole test session, whichever module asks first.

    A fixture imported into several modules is a separate fixture in each to pytest; this keeps
    them one process, stopped when the session-scoped fixture that started it is torn down.
    """
    if name not in _servers:
        stack = contextlib.ExitStack()
        where = folder()
        server = stack.enter_context(run_server(where, write_config(where, **config)))
        _servers[name] = (server, stack)
        request.addfinalizer(lambda: _stop(name))
        on_start(server)
    return _servers[name][0]


# The main server: the current vocabulary, no key, default deadlines. A model per test that
# needs one in a known load state; `lms-chat` is loaded at start, `lms-idle` is never used.
MAIN_MODELS = [
    scripted("lms-chat", "lmstudio_chat.yaml"),
    scripted("lms-idle", "lmstudio_chat.yaml"),
    scripted("lms-jit-stream", "lmstudio_jit.yaml"),
    scripted("lms-jit-plain", "lmstudio_jit.yaml"),
    scripted("lms-jit-shared", "lmstudio_slow_load.yaml"),
    scripted("lms-instances", "lmstudio_jit.yaml"),
]
# The other server: v0 events by config, an API key, and a short request deadline.
API_KEY = "sk-lm-e2e:secret"
DEADLINE_SECONDS = 2.0
V0_MODELS = [scripted("lms-chat", "lmstudio_chat.yaml"), scripted("lms-crawl", "lmstudio_crawl.yaml")]


def _preload(server: Server) -> None:
    with client_for(server) as client:
        response = client.post("/api/v1/models/load", json={"model": "lms-chat"})
        assert response.status_code == 200, response.text


@pytest.fixture(scope="session")
def lms_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Server:
    return shared_server(
        request, "main", lambda: tmp_path_factory.mktemp("lmstudio"), _preload, models=MAIN_MODELS
    )


@pytest.fixture(scope="session")
def lms_v0_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Server:
    return shared_server(
        request,
        "v0",
        lambda: tmp_path_factory.mktemp("lmstudio-v0"),
        models=V0_MODELS,
        server={"api_key": API_KEY, "request_timeout_seconds": DEADLINE_SECONDS},
        lmstudio={"events": "v0"},
    )


@pytest.fixture
def lms(lms_server: Server) -> Iterator[httpx.Client]:
    with client_for(lms_server) as client:
        yield client


@pytest.fixture
def lms_v0(lms_v0_server: Server) -> Iterator[httpx.Client]:
    """A client of the v0 server that sends its API key."""
    with client_for(lms_v0_server, {"Authorization": f"Bearer {API_KEY}"}) as client:
        yield client


# --- streams -----------------------------------------------------------------------------


@dataclass
class Event:
    name: str
    data: Json


@dataclass
class LMStream:
    response: httpx.Response
    events: list[Event]

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.events]

    def of(self, name: str) -> list[Json]:
        return [e.data for e in self.events if e.name == name]

    @property
    def result(self) -> Json:
        (end,) = self.of("chat.end")
        result: Json = end["result"]
        return result

    @property
    def error(self) -> Json | None:
        errors = self.of("error")
        return errors[0]["error"] if errors else None

    def text(self, kind: Literal["reasoning", "message"]) -> str:
        return "".join(d["content"] for d in self.of(f"{kind}.delta"))


def stream_chat(
    client: httpx.Client,
    body: Json,
    *,
    vocabulary: Vocabulary = "current",
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> LMStream:
    """POST a streaming chat, read the whole stream, and check it against the spec (see `check_stream`)."""
    with client.stream(
        "POST", "/api/v1/chat", json={**body, "stream": True}, params=params, headers=headers
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        text = b"".join(response.iter_raw()).decode()
    return parse_stream(response, text, vocabulary)


def parse_stream(response: httpx.Response, text: str, vocabulary: Vocabulary = "current") -> LMStream:
    """The named events of a whole stream's text, checked against the spec (see `check_stream`)."""
    events = []
    for frame in parse_sse(text):
        if frame.data is None:
            assert frame.comments and frame.event is None, frame  # a heartbeat, nothing else
            continue
        assert frame.event is not None, f"a data frame without an event name: {frame}"
        events.append(Event(frame.event, frame.json()))
    stream = LMStream(response, events)
    check_stream(stream, vocabulary)
    return stream


def post_chat(client: httpx.Client, body: Json, **kwargs: Any) -> httpx.Response:
    return client.post("/api/v1/chat", json=body, **kwargs)


def chat_body(client: httpx.Client, body: Json, **kwargs: Any) -> Json:
    """A non-streaming chat that must succeed; its body."""
    response = post_chat(client, body, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    result: Json = response.json()
    check_result(result)
    return result


# --- the event order ---------------------------------------------------------------------

_TRANSITIONS: dict[str, dict[str, str]] = {
    "begin": {"chat.start": "started"},
    "started": {"model_load.start": "loading", "prompt_processing.start": "prompt"},
    "loading": {"model_load.progress": "loading", "model_load.end": "loaded"},
    "loaded": {"prompt_processing.start": "prompt"},
    "prompt": {"prompt_processing.progress": "prompt_progress"},
    "prompt_progress": {"prompt_processing.progress": "prompt_progress", "prompt_processing.end": "blocks"},
    "blocks": {
        "reasoning.start": "reasoning",
        "message.start": "message",
        "tool_call.start": "tool",
        "error": "errored",
        "chat.end": "ended",
    },
    # A block cut off by an error is not ended: the error comes straight after its last delta.
    "reasoning": {"reasoning.delta": "reasoning", "reasoning.end": "blocks", "error": "errored"},
    "message": {"message.delta": "message", "message.end": "blocks", "error": "errored"},
    "tool": {"tool_call.arguments": "tool_arguments"},
    "tool_arguments": {"error": "errored"},  # a response that fails while its tools run
    "errored": {"chat.end": "ended"},
    "ended": {},
}


class EventOrder:
    """The documented order as a state machine; `feed` raises on the first event out of place.

    chat.start → [model_load.start, progress*, end] → prompt_processing.start, progress+, end →
    any sequence of reasoning.start/delta*/end, message.start/delta*/end and tool calls →
    [error] → chat.end, exactly once and last (a block an error cuts off has no end). A tool call is tool_call.start → tool_call.arguments
    → its result (success | failure, or v0's result); parallel calls may all start before their
    results come, in call order. A call to a tool no provider offers is a lone failure (v0: a lone
    result); a call whose arguments do not parse may fail right after its start. After a tool
    result, the tool loop's next round may start with prompt_processing.* again.
    """

    def __init__(self, vocabulary: Vocabulary = "current") -> None:
        self.vocabulary = vocabulary
        self.state = "begin"
        self.seen: list[str] = []
        self.pending = 0  # calls whose arguments came and whose result has not

    def _results(self) -> set[str]:
        return {"tool_call.result"} if self.vocabulary == "v0" else {"tool_call.success", "tool_call.failure"}

    def feed(self, name: str, data: Json) -> None:
        state = self.state
        after = f"after {self.seen[-5:]} (state {state})"
        if name in self._results() and state in ("blocks", "tool", "tool_arguments"):
            self._result(name, data, after)
        elif name == "tool_call.start" and state == "tool_arguments":
            self.state = "tool"  # a parallel call: its result comes with the others
        elif state == "blocks" and name == "prompt_processing.start" and self.seen[-1] in self._results():
            assert not self.pending, f"a new round with {self.pending} results missing {after}"
            self.state = "prompt"  # the tool loop's next round: the model reads the results
        else:
            following = _TRANSITIONS[state].get(name)
            assert following is not None, f"event {name!r} out of order {after}"
            if name == "tool_call.arguments":
                self.pending += 1
            self.state = following
        self.seen.append(name)

    def _result(self, name: str, data: Json, after: str) -> None:
        if self.state == "tool":
            assert name == "tool_call.failure", f"{name} without tool_call.arguments {after}"
            assert data["metadata"]["type"] == "invalid_arguments", data
        elif self.pending and not (
            name == "tool_call.failure" and data["metadata"]["type"] == "invalid_name"
        ):
            self.pending -= 1
        else:  # a lone result: only for a tool that does not exist
            lone_ok = name == "tool_call.result" or data["metadata"]["type"] == "invalid_name"
            assert lone_ok, f"a lone {name} that is not an unknown tool name: {data}"
        self.state = "tool_arguments" if self.pending else "blocks"

    def finish(self) -> None:
        assert self.state == "ended", f"the stream ended without chat.end: {self.seen[-5:]}"


# --- payloads ----------------------------------------------------------------------------


def _keys(data: Json, required: set[str], optional: frozenset[str] | set[str] = frozenset()) -> None:
    keys = set(data)
    assert required <= keys <= required | optional, (sorted(keys), sorted(required), data)


def _progress(value: Any) -> float:
    assert isinstance(value, float | int) and not isinstance(value, bool), value
    assert 0.0 <= value <= 1.0 and math.isfinite(value), value
    return float(value)


def check_error_object(error: Json) -> None:
    _keys(error, {"type", "message"}, {"code", "param"})
    assert error["type"] in ERROR_TYPES, error
    assert isinstance(error["message"], str) and error["message"], error
    assert "Traceback" not in error["message"], error
    for key in ("code", "param"):
        assert isinstance(error.get(key, ""), str), error


def check_provider_info(info: Any) -> None:
    assert isinstance(info, dict) and info.get("type") in ("plugin", "ephemeral_mcp"), info


def check_payload(event: Event) -> None:
    """The fields the spec gives each event, and nothing else."""
    name, data = event.name, event.data
    assert data.get("type") == name, f"event {name!r} carries type {data.get('type')!r}"
    fields = {k: v for k, v in data.items() if k != "type"}
    if name in ("chat.start", "model_load.start"):
        _keys(fields, {"model_instance_id"})
    elif name == "model_load.progress":
        _keys(fields, {"model_instance_id", "progress"})
        _progress(fields["progress"])
    elif name == "model_load.end":
        _keys(fields, {"model_instance_id", "load_time_seconds"})
        assert isinstance(fields["load_time_seconds"], float | int) and fields["load_time_seconds"] >= 0
    elif name == "prompt_processing.progress":
        _keys(fields, {"progress"})
        _progress(fields["progress"])
    elif name in ("reasoning.delta", "message.delta"):
        _keys(fields, {"content"})
        assert isinstance(fields["content"], str) and fields["content"], data
    elif name == "tool_call.start":
        _keys(fields, {"tool", "provider_info"})
        check_provider_info(fields["provider_info"])
    elif name == "tool_call.arguments":
        _keys(fields, {"tool", "arguments", "provider_info"})
        assert isinstance(fields["arguments"], dict), data
    elif name in ("tool_call.success", "tool_call.result"):
        _keys(fields, {"tool", "arguments", "output", "provider_info"})
        assert isinstance(fields["tool"], str) and fields["tool"], data
        assert isinstance(fields["arguments"], dict) and isinstance(fields["output"], str), data
        if name == "tool_call.success" or fields["provider_info"] is not None:
            check_provider_info(fields["provider_info"])
        # v0 has no failure event: a call to a tool nobody provides is a result with no provider.
    elif name == "tool_call.failure":
        _keys(fields, {"reason", "metadata"})
        check_failure_metadata(fields["reason"], fields["metadata"])
    elif name == "error":
        _keys(fields, {"error"})
        check_error_object(fields["error"])
    elif name == "chat.end":
        _keys(fields, {"result"})
        check_result(fields["result"])
    else:
        _keys(fields, set())  # *.start / *.end markers carry only their type


def check_failure_metadata(reason: Any, metadata: Any) -> None:
    assert isinstance(reason, str) and reason, reason
    assert isinstance(metadata, dict) and isinstance(metadata.get("tool_name"), str), metadata
    if metadata.get("type") == "invalid_name":
        _keys(metadata, {"type", "tool_name"})
    else:
        assert metadata.get("type") == "invalid_arguments", metadata
        _keys(metadata, {"type", "tool_name"}, {"arguments", "provider_info"})


def check_result(result: Json) -> None:
    """A non-streaming body (and `chat.end.result`): its fields and output items."""
    _keys(result, {"model_instance_id", "output", "stats"}, {"response_id"})
    assert isinstance(result["model_instance_id"], str) and result["model_instance_id"]
    if "response_id" in result:
        assert RESPONSE_ID.match(result["response_id"]), result["response_id"]
    stats = result["stats"]
    _keys(
        stats,
        {"input_tokens", "total_output_tokens", "reasoning_output_tokens", *TIMING_STATS},
        {"model_load_time_seconds"},
    )
    for key in ("input_tokens", "total_output_tokens", "reasoning_output_tokens"):
        assert isinstance(stats[key], int) and stats[key] >= 0, stats
    assert stats["reasoning_output_tokens"] <= stats["total_output_tokens"], stats
    for key in (*TIMING_STATS, "model_load_time_seconds"):
        if key in stats:
            assert isinstance(stats[key], float | int) and stats[key] >= 0, stats
    for item in result["output"]:
        kind = item.get("type")
        if kind in ("message", "reasoning"):
            _keys(item, {"type", "content"})
            assert isinstance(item["content"], str), item
        elif kind == "tool_call":
            _keys(item, {"type", "tool", "arguments", "output", "provider_info"})
            check_provider_info(item["provider_info"])
        elif kind == "invalid_tool_call":
            _keys(item, {"type", "reason", "metadata"})
            check_failure_metadata(item["reason"], item["metadata"])
        else:
            raise AssertionError(f"unknown output item {item}")


def rebuild_output(stream: LMStream) -> list[Json]:
    """The output items the events describe, in order (current vocabulary)."""
    output: list[Json] = []
    for event in stream.events:
        name, data = event.name, event.data
        if name in ("reasoning.start", "message.start"):
            output.append({"type": name.split(".")[0], "content": ""})
        elif name in ("reasoning.delta", "message.delta"):
            output[-1]["content"] += data["content"]
        elif name == "tool_call.failure":
            output.append(
                {"type": "invalid_tool_call", "reason": data["reason"], "metadata": data["metadata"]}
            )
        elif name == "tool_call.success":
            output.append({"type": "tool_call", **{k: v for k, v in data.items() if k != "type"}})
    return output


def check_stream(stream: LMStream, vocabulary: Vocabulary) -> None:
    """Order, payloads, progress, one instance id, and chat.end agreeing with the events."""
    order = EventOrder(vocabulary)
    for event in stream.events:
        order.feed(event.name, event.data)
        check_payload(event)
    order.finish()
    for phase in ("model_load", "prompt_processing"):
        last = 0.0  # per round: each tool round processes its prompt anew
        for event in stream.events:
            if event.name == f"{phase}.start":
                last = 0.0
            elif event.name == f"{phase}.progress":
                value = _progress(event.data["progress"])
                assert value >= last, f"{phase} progress went backwards: {last} then {value}"
                last = value
    instance_ids = {e.data["model_instance_id"] for e in stream.events if "model_instance_id" in e.data}
    assert instance_ids == {stream.result["model_instance_id"]}, instance_ids
    if stream.of("model_load.end"):
        (load_end,) = stream.of("model_load.end")
        assert stream.result["stats"]["model_load_time_seconds"] == load_end["load_time_seconds"]
    else:
        assert "model_load_time_seconds" not in stream.result["stats"], stream.result["stats"]
    if vocabulary == "current":
        assert rebuild_output(stream) == stream.result["output"]
    else:
        text_items = [i for i in stream.result["output"] if i["type"] in ("reasoning", "message")]
        assert [i for i in rebuild_output(stream) if i["type"] != "invalid_tool_call"] == text_items
        tool_items = [i for i in stream.result["output"] if i["type"] not in ("reasoning", "message")]
        assert len(stream.of("tool_call.result")) == len(tool_items)


def comparable(result: Json) -> Json:
    """A result without what differs between two runs of the same script: timing and the id."""
    stats = {k: v for k, v in result["stats"].items() if k not in TIMING_STATS}
    return {**{k: v for k, v in result.items() if k != "response_id"}, "stats": stats}


# --- errors ------------------------------------------------------------------------------


def assert_lmstudio_error(
    response: httpx.Response,
    status: int,
    *,
    type: str = "invalid_request",
    code: str | None = None,
    param: str | None = None,
    mentions: tuple[str, ...] = (),
) -> Json:
    """The body is `{"error": {type, message, code?, param?}}` with these values (None: absent)."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error: Json = body["error"]
    check_error_object(error)
    assert error["type"] == type, error
    assert error.get("code") == code, error
    assert error.get("param") == param, error
    for text in mentions:
        assert text in error["message"], (text, error["message"])
    return error


@contextlib.contextmanager
def client_for(server: Server, headers: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30.0, headers=headers) as client:
        yield client
