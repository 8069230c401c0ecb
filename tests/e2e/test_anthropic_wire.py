"""Raw-wire tests of /v1/messages: the exact event order and framing Anthropic uses, the headers
and query Claude Code sends, and Anthropic's error shape on every failure path."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from conftest import StartServer
from e2e_support import DEFAULT_REPLY, FAIL_CONTENT_WORDS, FAIL_MESSAGE, Server, scripted, stream_raw

pytestmark = pytest.mark.e2e

CLAUDE_CODE_HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "effort-2025-11-24,advanced-tool-use-2025-11-20,some-future-beta-2030-01-01",
    "x-app": "cli",
    "X-Claude-Code-Session-Id": "6b0f6a57-0000-4000-8000-000000000000",
    "X-Stainless-Lang": "js",
}


def body(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "chat", "max_tokens": 1000, "messages": [{"role": "user", "content": content}], **extra}


def stream(
    server: Server, payload: dict[str, Any], path: str = "/v1/messages?beta=true"
) -> list[dict[str, Any]]:
    raw = stream_raw(server.base_url, {**payload, "stream": True}, CLAUDE_CODE_HEADERS, path=path)
    assert raw.response.headers["content-type"].startswith("text/event-stream")
    assert not any(frame.is_done for frame in raw.frames)  # no [DONE] in this dialect
    return raw.events  # checks `event:` == data `type` on every frame


def order(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for event in events:
        name = event["type"]
        if name == "content_block_delta":
            name = event["delta"]["type"]
        out.append(name)
    return out


def test_text_event_order(server: Server) -> None:
    events = stream(server, body("hi"))
    words = len(DEFAULT_REPLY.split())
    assert order(events) == [
        "message_start",
        "content_block_start",
        *["text_delta"] * words,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["stop_reason"] is None
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == DEFAULT_REPLY
    final = events[-2]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == words


def test_thinking_and_tool_use_event_order(server: Server) -> None:
    tool = {"name": "get_weather", "input_schema": {"type": "object"}}
    events = stream(server, body("weather?", tools=[tool], thinking={"type": "adaptive"}))
    names = order(events)
    # thinking block: deltas, then exactly one signature_delta right before its stop
    first_stop = names.index("content_block_stop")
    assert names[1] == "content_block_start" and names[first_stop - 1] == "signature_delta"
    assert names.count("signature_delta") == 1
    assert set(names[2 : first_stop - 1]) == {"thinking_delta"}
    # then the tool_use block with input_json_delta pieces
    assert names[first_stop + 1] == "content_block_start"
    tool_start = events[first_stop + 1]
    assert tool_start["index"] == 1 and tool_start["content_block"]["type"] == "tool_use"
    assert tool_start["content_block"]["input"] == {}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[first_stop + 2 : -3]) == {"input_json_delta"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


def test_mid_stream_error_ends_the_stream(server: Server) -> None:
    events = stream(server, body("fail please"))
    names = order(events)
    assert names == [
        "message_start",
        "content_block_start",
        *["text_delta"] * len(FAIL_CONTENT_WORDS),
        "error",
    ]
    assert events[-1] == {"type": "error", "error": {"type": "api_error", "message": FAIL_MESSAGE}}


def test_path_prefix_query_and_headers_accepted(server: Server) -> None:
    response = httpx.post(
        server.base_url + "/v1/messages?beta=true", json=body("hi"), headers=CLAUDE_CODE_HEADERS, timeout=30
    )
    assert response.status_code == 200, response.text
    message = response.json()
    assert message["type"] == "message" and message["content"][0]["text"] == DEFAULT_REPLY


@pytest.mark.parametrize(
    ("payload", "status", "error_type"),
    [
        ({"model": "chat", "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error"),
        (body("hi", model="missing-model"), 404, "not_found_error"),
        ([1, 2], 400, "invalid_request_error"),
    ],
)
def test_errors_have_anthropic_shape(server: Server, payload: Any, status: int, error_type: str) -> None:
    response = httpx.post(server.base_url + "/v1/messages", json=payload, timeout=30)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == error_type
    assert set(error["error"]) == {"type", "message"}


def test_unknown_paths_and_methods_have_anthropic_shape(server: Server) -> None:
    missing = httpx.post(server.base_url + "/v1/messages/batches", json={}, timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    wrong = httpx.get(server.base_url + "/v1/messages", timeout=30)
    assert wrong.status_code == 405
    assert wrong.json()["type"] == "error"


def test_bad_json_and_count_tokens(server: Server) -> None:
    response = httpx.post(
        server.base_url + "/v1/messages", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    counted = httpx.post(
        server.base_url + "/v1/messages/count_tokens?beta=true",
        json={"model": "chat", "messages": [{"role": "user", "content": "one two three"}]},
        headers=CLAUDE_CODE_HEADERS,
    )
    assert counted.status_code == 200 and counted.json() == {"input_tokens": 3 + 4}


def test_ping_events_while_waiting(start_server: StartServer) -> None:
    """The engine says nothing for a second: Anthropic `ping` events keep the stream alive from
    the start (before `message_start` too), and the SDK skips them."""
    late = start_server({"heartbeat_seconds": 0.2}, [scripted("late", "late.yaml")])
    payload = {"model": "late", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    raw = stream_raw(late.base_url, {**payload, "stream": True}, path="/v1/messages")
    assert raw.text.startswith('event: ping\ndata: {"type":"ping"}\n\n')
    names = order(raw.events)
    assert names[0] == "ping" and "message_start" in names
    with (
        anthropic.Anthropic(base_url=late.base_url, api_key="x", max_retries=0) as sdk,
        sdk.messages.stream(**payload) as stream,  # type: ignore[arg-type]
    ):
        message = stream.get_final_message()
    assert message.content[0].text == "Finally, an answer."  # type: ignore[union-attr]
