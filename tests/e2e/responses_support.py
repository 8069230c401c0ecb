"""Helpers for the Responses end-to-end tests: a server with a `[responses]` table, the schema.

The process, SSE and error helpers are e2e_support's (re-exported here); each server gets its own
folder, config and data directory, and is terminated when its `with` ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import e2e_support
import jsonschema
import referencing
import referencing.jsonschema
from e2e_support import RawStream, run_server, scripted, write_config

# Re-exported for the Responses test modules.
from e2e_support import assert_openai_error as assert_openai_error
from e2e_support import events_of as events_of
from e2e_support import parse_sse as parse_sse

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

T = TypeVar("T")


@dataclass
class Server(e2e_support.Server):
    responses: dict[str, Any] = field(default_factory=dict)  # its [responses] settings

    @property
    def store_file(self) -> Path:
        return self.folder / "data" / "sluicegate.sqlite3"


@contextlib.contextmanager
def running_server(
    folder: Path,
    *,
    server: dict[str, Any] | None = None,
    responses: dict[str, Any] | None = None,
    models: dict[str, str],
) -> Iterator[Server]:
    """`python -m sluicegate serve` with its own data_dir and these settings; `models` maps model id →
    script file name. Waits for /health, terminates at the end."""
    config = write_config(
        folder,
        {"data_dir": str(folder / "data"), **(server or {})},
        [scripted(model_id, script) for model_id, script in models.items()],
        {"responses": responses} if responses else None,
    )
    with run_server(folder, config, startup_timeout=STARTUP_TIMEOUT, stop_timeout=STOP_TIMEOUT) as s:
        yield Server(s.base_url, s.process, s.stderr_path, s.stdout_path, dict(responses or {}))


def poll(check: Callable[[], T], timeout: float = 60.0, interval: float = 0.02) -> T:
    """e2e_support.poll that fails the test when `timeout` passes; returns the truthy value.
    The timeout only bounds a hang: a loaded 2-core machine can take tens of seconds."""
    return e2e_support.poll(check, timeout, interval, fail=True)


def stream_raw(
    base_url: str, body: dict[str, Any], *, method: str = "POST", path: str = "/v1/responses"
) -> RawStream:
    """One whole Responses event stream, as text and as parsed frames."""
    return e2e_support.stream_raw(base_url, body, method=method, path=path)


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


# --- MCP items: the Open Responses schema has none, so they are checked by the SDK's types ---

MCP_ITEM_TYPES = {"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"}


@cache
def _sdk_event_classes() -> dict[str, Any]:
    from typing import get_args

    from openai.types.responses import ResponseStreamEvent

    (union, *_) = get_args(ResponseStreamEvent)
    return {cls.model_fields["type"].annotation.__args__[0]: cls for cls in get_args(union)}


def validate_sdk_event(event: dict[str, Any]) -> None:
    """The event validates as the openai SDK's own class for its type (field names and types)."""
    from pydantic import TypeAdapter

    classes = _sdk_event_classes()
    assert event["type"] in classes, f"the openai SDK has no event of type {event['type']!r}"
    TypeAdapter(classes[event["type"]]).validate_python(event)


def _without_mcp(response: dict[str, Any]) -> dict[str, Any]:
    return {
        **response,
        "output": [i for i in response["output"] if i.get("type") not in MCP_ITEM_TYPES],
        "tools": [t for t in response["tools"] if t.get("type") != "mcp"],
    }


def validate_mixed_event(event: dict[str, Any]) -> None:
    """Every event against the SDK's types; and against the Open Responses schema too, except
    for the MCP events and items it does not define (response objects are checked without their
    MCP items and tools)."""
    validate_sdk_event(event)
    _, by_type = _schema()
    kind = OPENAI_REASONING_NAMES.get(event["type"], event["type"])
    if kind not in by_type:
        assert event["type"].startswith(("response.mcp_call", "response.mcp_list_tools")), event["type"]
        return
    if event.get("item", {}).get("type") in MCP_ITEM_TYPES:
        return
    if "response" in event:
        event = {**event, "response": _without_mcp(event["response"])}
    validate_event(event)
