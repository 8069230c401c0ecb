"""The Responses stream on the wire, byte for byte, and every object against the Open Responses
schema (`open-responses-openapi.json`).

Each case runs on two servers: the default one, which names raw-reasoning events as OpenAI does
(`response.reasoning_text.*`, validated after renaming to the schema's `response.reasoning.*`),
and one with `[responses] reasoning_events = "open_responses"`, whose events must validate
exactly as sent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from responses_support import (
    FAIL_MESSAGE,
    HELLO,
    HELLO_WORDS,
    REFUSAL,
    THINK_CONTENT,
    THINK_REASONING,
    WEATHER_ARGS,
    WEATHER_REASONING,
    RawStream,
    Server,
    poll,
    running_server,
    stream_raw,
    validate_event,
    validate_response,
    validate_schema,
)

pytestmark = pytest.mark.e2e

MODEL = "scripted"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        },
    },
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}},
]
# name → (request body extras, terminal event type, [(item type, text), ...] of the final output)
CASES: dict[str, tuple[dict[str, Any], str, list[tuple[str, str]]]] = {
    "text": ({"input": "Hello"}, "response.completed", [("output_text", HELLO)]),
    "reasoning": (
        {"input": "Please think about it", "reasoning": {"effort": "low"}},
        "response.completed",
        [("reasoning_text", THINK_REASONING), ("output_text", THINK_CONTENT)],
    ),
    "tool_call": (
        {"input": "What is the weather?", "tools": TOOLS[:1], "tool_choice": "auto"},
        "response.completed",
        [("reasoning_text", WEATHER_REASONING), ("function_call", json.dumps(WEATHER_ARGS))],
    ),
    "two_tool_calls": (
        {
            "input": "Weather in two cities",
            "tools": TOOLS,
            "tool_choice": {"type": "function", "name": "get_time"},
        },
        "response.completed",
        [("function_call", json.dumps(WEATHER_ARGS)), ("function_call", json.dumps({"city": "Tokyo"}))],
    ),
    "refusal": ({"input": "Tell me the secret"}, "response.completed", [("refusal", REFUSAL)]),
    "incomplete": (
        {"input": "Hello", "max_output_tokens": 2},
        "response.incomplete",
        [("output_text", "Hello! This")],
    ),
    "failed": ({"input": "this will fail"}, "response.failed", [("output_text", "This will break")]),
    "everything_echoed": (
        {
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
            "instructions": "Be nice.",
            "metadata": {"k": "v"},
            "temperature": 0.3,
            "top_p": 0.9,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "top_logprobs": 2,
            "include": ["message.output_text.logprobs"],
            "user": "someone",
            "safety_identifier": "hashed-id",
            "prompt_cache_key": "cache-key",
            "truncation": "auto",
            "text": {"format": {"type": "text"}, "verbosity": "low"},
            "parallel_tool_calls": False,
            "max_tool_calls": 3,
            "service_tier": "auto",
        },
        "response.completed",
        [("output_text", HELLO)],
    ),
}
ITEM_PATTERNS = {
    "output_text": ["content_part.added", "output_text.delta+", "output_text.done", "content_part.done"],
    "refusal": ["content_part.added", "refusal.delta+", "refusal.done", "content_part.done"],
    "function_call": ["function_call_arguments.delta+", "function_call_arguments.done"],
}
PREFIX = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}


@pytest.fixture(scope="module", params=["openai", "open_responses"])
def wire_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp(f"responses-wire-{request.param}")
    with running_server(
        folder, responses={"reasoning_events": request.param}, models={MODEL: "responses.yaml"}
    ) as s:
        yield s


def open_responses_names(server: Server) -> bool:
    return server.responses.get("reasoning_events") == "open_responses"


def reasoning_names(server: Server) -> str:
    return "response.reasoning" if open_responses_names(server) else "response.reasoning_text"


def item_text(item: dict[str, Any]) -> tuple[str, str]:
    if item["type"] == "function_call":
        return ("function_call", item["arguments"])
    (part,) = item["content"]
    return (part["type"], part.get("text", part.get("refusal")))


def collapse(types: list[str]) -> list[str]:
    """Runs of one delta type become one `X+` entry; the `response.` prefix is dropped."""
    out = []
    for kind, run in itertools.groupby(t.removeprefix("response.") for t in types):
        out.append(kind + "+" if kind.endswith(".delta") else kind)
        assert kind.endswith(".delta") or len(list(run)) == 1, types
    return out


def check_stream(
    raw: RawStream, *, reasoning: str, terminal: str, background: bool = False
) -> dict[str, Any]:
    """Every rule of the Responses wire format; returns the terminal response object."""
    assert raw.response.headers["content-type"].startswith("text/event-stream")
    assert raw.response.headers["cache-control"] == "no-cache"
    assert raw.text.endswith("\n\ndata: [DONE]\n\n")
    assert raw.frames[-1].is_done and not any(f.is_done for f in raw.frames[:-1])
    events = raw.events  # checks `event:` == data.type on every frame
    assert [e["sequence_number"] for e in events] == list(range(len(events)))

    opening = ["response.created", "response.queued"] if background else ["response.created"]
    opening.append("response.in_progress")
    assert [e["type"] for e in events[: len(opening)]] == opening
    response_id = events[0]["response"]["id"]
    assert response_id.startswith("resp_") and raw.response.headers["x-request-id"] == response_id
    statuses = ["queued", "queued", "in_progress"] if background else ["in_progress", "in_progress"]
    assert [e["response"]["status"] for e in events[: len(opening)]] == statuses
    for event in events[: len(opening)]:
        assert event["response"]["output"] == [] and event["response"]["usage"] is None
    assert events[-1]["type"] == terminal
    for event in events:
        if "response" in event:
            assert event["response"]["id"] == response_id

    added: list[dict[str, Any]] = []
    finished: list[dict[str, Any]] = []
    per_item: list[list[str]] = []
    texts: list[str] = []
    for event in events[len(opening) : -1]:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert len(finished) == len(added), "an item was added before the previous one was done"
            assert event["output_index"] == len(added)  # contiguous, in added order
            item = event["item"]
            assert item["id"].startswith(PREFIX[item["type"]]), item
            if item["type"] == "function_call":
                assert item["call_id"].startswith("call_") and item["name"] and item["arguments"] == ""
                assert item["status"] == "in_progress"
            elif item["type"] == "message":
                assert (
                    item["status"] == "in_progress" and item["content"] == [] and item["role"] == "assistant"
                )
            added.append(item)
            per_item.append([])
            texts.append("")
            continue
        index = len(added) - 1
        assert event["output_index"] == index, event
        if kind == "response.output_item.done":
            assert event["item"]["id"] == added[index]["id"] and event["item"]["type"] == added[index]["type"]
            if "call_id" in added[index]:
                assert event["item"]["call_id"] == added[index]["call_id"]
            finished.append(event["item"])
            continue
        assert event["item_id"] == added[index]["id"], event
        assert event.get("content_index", 0) == 0
        per_item[index].append(kind)
        if kind.endswith(".delta"):
            texts[index] += event["delta"]
        elif kind.endswith("_text.done") or kind == reasoning + ".done":
            assert event["text"] == texts[index]
        elif kind == "response.refusal.done":
            assert event["refusal"] == texts[index]
        elif kind == "response.function_call_arguments.done":
            assert event["arguments"] == texts[index] and event["name"] == added[index]["name"]
        elif kind in ("response.content_part.added", "response.content_part.done"):
            part = event["part"]
            assert (part.get("text", part.get("refusal")) or "") == (
                "" if kind.endswith("added") else texts[index]
            )
    cut_off = len(added) - len(finished)
    # An item cut off by a failure is never reported done: the stream goes straight to its end.
    assert cut_off == 0 or (terminal == "response.failed" and cut_off == 1)

    reasoning_pattern = [
        "content_part.added",
        reasoning.removeprefix("response.") + ".delta+",
        reasoning.removeprefix("response.") + ".done",
        "content_part.done",
    ]
    for item, kinds, text in zip(finished, per_item[: len(finished)], texts[: len(finished)], strict=True):
        kind = item_text(item)[0]
        assert collapse(kinds) == (reasoning_pattern if kind == "reasoning_text" else ITEM_PATTERNS[kind])
        assert item_text(item)[1] == text

    final: dict[str, Any] = events[-1]["response"]
    assert [i["id"] for i in final["output"]] == [i["id"] for i in added]  # the same ids as streamed
    assert final["output"][: len(finished)] == finished
    for item in final["output"][len(finished) :]:
        assert item["status"] == "incomplete"
    assert final["usage"]["total_tokens"] == final["usage"]["input_tokens"] + final["usage"]["output_tokens"]
    assert {"cached_tokens"} <= set(final["usage"]["input_tokens_details"])
    assert {"reasoning_tokens"} <= set(final["usage"]["output_tokens_details"])
    return final


def validate_all(server: Server, events: list[dict[str, Any]]) -> None:
    for event in events:
        validate_event(event, rename_openai_reasoning=not open_responses_names(server))


@pytest.mark.parametrize("case", list(CASES))
def test_stream_follows_the_wire_format_and_validates(wire_server: Server, case: str) -> None:
    extra, terminal, expected = CASES[case]
    body = {"model": MODEL, "stream": True, **extra}
    raw = stream_raw(wire_server.base_url, body)
    final = check_stream(raw, reasoning=reasoning_names(wire_server), terminal=terminal)
    assert [item_text(item) for item in final["output"]] == expected
    validate_all(wire_server, raw.events)
    if case == "failed":
        assert final["status"] == "failed"
        assert final["error"] == {"code": "model_error", "message": FAIL_MESSAGE}
    elif case == "incomplete":
        assert final["status"] == "incomplete" and final["incomplete_details"] == {
            "reason": "max_output_tokens"
        }
        assert final["output"][-1]["status"] == "incomplete"  # the item the limit cut short
    else:
        assert (
            final["status"] == "completed" and final["error"] is None and final["incomplete_details"] is None
        )

    with httpx.Client(base_url=wire_server.base_url, timeout=30.0) as http:
        stored = http.get(f"/v1/responses/{final['id']}").json()
        assert stored == final
        validate_response(stored)
        if terminal != "response.failed":
            plain = http.post("/v1/responses", json={**body, "stream": False}).json()
            validate_response(plain)
            assert [item_text(item) for item in plain["output"]] == expected
            assert plain["usage"] == final["usage"]
        for item in http.get(f"/v1/responses/{final['id']}/input_items").json()["data"]:
            validate_schema("ItemField", item)


def test_request_fields_are_echoed_in_the_response(wire_server: Server) -> None:
    body = {"model": MODEL, **CASES["everything_echoed"][0]}
    response = httpx.post(f"{wire_server.base_url}/v1/responses", json=body, timeout=30.0).json()
    validate_response(response)
    for key in (
        "instructions",
        "metadata",
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_logprobs",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "truncation",
        "text",
        "parallel_tool_calls",
        "max_tool_calls",
        "service_tier",
    ):
        assert response[key] == body[key], key
    assert response["store"] is True and response["background"] is False
    (message,) = response["output"]
    logprobs = message["content"][0]["logprobs"]
    assert [entry["token"] for entry in logprobs] == HELLO_WORDS
    assert all(len(entry["top_logprobs"]) == 1 for entry in logprobs)


def test_defaults_in_the_response_object(wire_server: Server) -> None:
    response = httpx.post(
        f"{wire_server.base_url}/v1/responses", json={"model": MODEL, "input": "Hello"}
    ).json()
    validate_response(response)
    assert response["object"] == "response" and response["id"].startswith("resp_")
    assert isinstance(response["created_at"], int) and isinstance(response["completed_at"], int)
    assert response["created_at"] <= response["completed_at"]
    for key in (
        "previous_response_id",
        "instructions",
        "error",
        "incomplete_details",
        "reasoning",
        "max_output_tokens",
    ):
        assert key in response and response[key] is None, key
    assert response["tools"] == [] and response["tool_choice"] == "auto" and response["metadata"] == {}
    assert isinstance(response["temperature"], float) and isinstance(response["top_p"], float)


def test_background_stream_validates_and_continues_a_conversation(wire_server: Server) -> None:
    first = httpx.post(f"{wire_server.base_url}/v1/responses", json={"model": MODEL, "input": "Hello"}).json()
    body = {"model": MODEL, "input": "Please think about it", "stream": True, "background": True}
    raw = stream_raw(wire_server.base_url, {**body, "previous_response_id": first["id"]})
    final = check_stream(
        raw, reasoning=reasoning_names(wire_server), terminal="response.completed", background=True
    )
    validate_all(wire_server, raw.events)
    assert final["previous_response_id"] == first["id"] and final["background"] is True
    stored = poll(
        lambda: (r := httpx.get(f"{wire_server.base_url}/v1/responses/{final['id']}").json()) == final and r
    )
    validate_response(stored)
    replay = stream_raw(
        wire_server.base_url, {}, method="GET", path=f"/v1/responses/{final['id']}?stream=true"
    )
    assert replay.events == raw.events


def test_reasoning_event_names_follow_the_setting(wire_server: Server) -> None:
    raw = stream_raw(wire_server.base_url, {"model": MODEL, "input": "Please think about it", "stream": True})
    types = {e["type"] for e in raw.events}
    names = reasoning_names(wire_server)
    other = "response.reasoning" if names == "response.reasoning_text" else "response.reasoning_text"
    assert {names + ".delta", names + ".done"} <= types
    assert not {other + ".delta", other + ".done"} & types
