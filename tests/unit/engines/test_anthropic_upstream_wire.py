"""The `anthropic` engine's pure pieces: Messages events → raw events (anthropic_wire.py) and
ChatRequest → Messages body (anthropic_body.py), against Anthropic's documented shapes."""

from __future__ import annotations

from typing import Any

from fake_anthropic import event, message, overloaded

from sluicegate.core.errors import ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams, ToolCall, ToolSpec
from sluicegate.engines.upstream.anthropic_body import Signatures, messages_body
from sluicegate.engines.upstream.anthropic_wire import MessagesDecoder
from sluicegate.engines.upstream.wire import SSEReader


def decode(frames: list[bytes | None], decoder: MessagesDecoder | None = None) -> list[RawEvent]:
    decoder = decoder or MessagesDecoder()
    reader = SSEReader()
    out: list[RawEvent] = []
    for frame in frames:
        assert frame is not None
        for name, data in reader.feed(frame):
            out += decoder.frame(name, data)
    return out + decoder.end()


def test_thinking_text_tool_use_and_usage() -> None:
    remembered: list[tuple[str, str]] = []
    frames = message(
        [
            {"type": "thinking", "thinking": "Plan it.", "signature": "sig-1"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
        ],
        stop_reason="tool_use",
        input_tokens=3,
        cache_read=7,
        cache_creation=2,
        output_tokens=9,
    )
    events = decode(frames, MessagesDecoder(lambda text, sig: remembered.append((text, sig))))
    reasoning = "".join(
        e.text for e in events if isinstance(e, TextDelta) and e.channel is ItemKind.REASONING
    )
    text = "".join(e.text for e in events if isinstance(e, TextDelta) and e.channel is ItemKind.MESSAGE)
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (reasoning, text) == ("Plan it.", "Calling.")
    assert calls[0].call_id == "toolu_1" and calls[0].name == "f" and calls[0].index == 0
    assert "".join(c.arguments for c in calls) == '{"a": 1}'
    assert remembered == [("Plan it.", "sig-1")]
    usage, finish = events[-2:]
    assert isinstance(usage, UsageReport) and isinstance(finish, Finished)
    assert (usage.usage.prompt_tokens, usage.usage.cached_tokens, usage.usage.completion_tokens) == (12, 7, 9)
    assert finish.reason is FinishReason.TOOL_CALLS


def test_stop_reasons() -> None:
    for reason, expected in (
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("refusal", FinishReason.CONTENT_FILTER),
    ):
        events = decode(message([{"type": "text", "text": "x"}], stop_reason=reason))
        assert isinstance(events[-1], Finished) and events[-1].reason is expected


def test_error_event_and_early_close() -> None:
    events = decode([*message([{"type": "text", "text": "a b"}])[:4], overloaded()])
    assert isinstance(events[-1], Failed) and events[-1].error.kind is ErrorKind.OVERLOADED
    cut = decode(message([{"type": "text", "text": "a"}])[:4])
    assert isinstance(cut[-1], Failed) and cut[-1].error.code == "upstream_closed_early"
    # ping, unknown events and server tools' blocks are skipped without failing
    extra = [
        event("ping", {}),
        event(
            "content_block_start",
            {"index": 9, "content_block": {"type": "server_tool_use", "id": "s", "name": "web_search"}},
        ),
        event("future_event", {"x": 1}),
    ]
    frames = message([{"type": "text", "text": "ok"}])
    events = decode([frames[0], *extra, *frames[1:]])
    assert next(e for e in events if isinstance(e, TextDelta)).text == "ok"
    assert isinstance(events[-1], Finished)


def request(**extra: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], **extra)


def test_body_messages_tools_and_thinking() -> None:
    signatures = Signatures()
    signatures.remember("why", "sig-why")
    chat = ChatRequest(
        model="m",
        messages=[
            Message("system", "sys one"),
            Message("developer", "sys two"),
            Message(
                "user",
                [
                    ContentPart("text", text="look"),
                    ContentPart("image", image_url="data:image/png;base64,QUJD"),
                ],
            ),
            Message("assistant", "", tool_calls=[ToolCall("toolu_1", "f", '{"a":1}')], reasoning="why"),
            Message("tool", "r1", tool_call_id="toolu_1"),
        ],
        tools=[ToolSpec("f", "does f", {"type": "object"})],
        tool_choice="required",
        parallel_tool_calls=False,
        sampling=SamplingParams(temperature=0.5, top_k=20, stop=["END"], max_tokens=20000),
        reasoning_effort="high",
    )
    body = messages_body(chat, "claude-x", signatures)
    assert body["system"] == "sys one\n\nsys two"
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "why", "signature": "sig-why"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r1"}]},
    ]
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object"}, "description": "does f"}]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert "temperature" not in body and "top_k" not in body  # thinking allows neither
    assert body["stop_sequences"] == ["END"] and body["max_tokens"] == 20000 and body["stream"] is True


def test_unsigned_tool_turn_turns_thinking_off() -> None:
    chat = ChatRequest(
        model="m",
        messages=[
            Message("user", "q"),
            Message("assistant", "", tool_calls=[ToolCall("t1", "f", "{}")], reasoning="not ours to sign"),
            Message("tool", "r", tool_call_id="t1"),
        ],
        reasoning_effort="medium",
    )
    body = messages_body(chat, "m", Signatures())
    assert "thinking" not in body
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]
    # a new user turn starts afresh: thinking is on again
    chat.messages.append(Message("user", "next"))
    assert messages_body(chat, "m", Signatures())["thinking"]["type"] == "enabled"


def test_body_defaults() -> None:
    body = messages_body(request(), "up", Signatures())
    assert body == {
        "model": "up",
        "max_tokens": 16384,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }
    assert "thinking" not in messages_body(request(reasoning_effort="none"), "up", Signatures())
    small = messages_body(
        request(reasoning_effort="high", sampling=SamplingParams(max_tokens=500)), "up", Signatures()
    )
    assert "thinking" not in small  # no budget of at least 1024 fits under max_tokens


def test_signature_memory_is_bounded() -> None:
    signatures = Signatures(limit=2)
    for i in range(3):
        signatures.remember(f"t{i}", f"s{i}")
    assert signatures.get("t0") is None and signatures.get("t2") == "s2"
