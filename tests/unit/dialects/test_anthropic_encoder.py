"""AnthropicEncoder: canonical events → Anthropic's SSE events, in Anthropic's order, and what
the `anthropic` SDK's own stream accumulator (what `messages.stream()` runs) makes of them."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import EngineFailure, ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    ProviderInfo,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    ToolResult,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import Frame
from sluicegate.core.segment import segment
from sluicegate.dialects.anthropic.encoder import (
    AnthropicEncoder,
    anthropic_error,
    anthropic_status,
    message_body,
)
from sluicegate.dialects.anthropic.signature import ThinkingSigner

SIGNER = ThinkingSigner(b"s" * 32)
EVENT = TypeAdapter(RawMessageStreamEvent)


async def _raw(events: list[RawEvent], fail: bool = False) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event
    if fail:
        raise EngineFailure("boom", code="engine_error")


async def encode(
    raw: list[RawEvent], *, fail: bool = False, omit: bool = False
) -> tuple[list[Frame], Accumulator]:
    encoder = AnthropicEncoder("msg_1", "m", SIGNER, omit_thinking=omit)
    accumulator = Accumulator()
    frames: list[Frame] = []
    async for event in segment(_raw(raw, fail)):
        accumulator.feed(event)
        frames += encoder.encode(event)
    return frames, accumulator


def names(frames: list[Frame]) -> list[str]:
    out = []
    for frame in frames:
        body = orjson.loads(frame.data)
        assert body["type"] == frame.event  # Anthropic repeats the event name in `type`
        out.append(frame.event or "")
    return out


def sdk_message(frames: list[Frame]) -> Message:
    snapshot: Any = None
    # Newer SDKs keep the tool inputs' JSON text in buffers of the caller's.
    extra: dict[str, Any] = (
        {"json_bufs": {}} if "json_bufs" in inspect.signature(accumulate_event).parameters else {}
    )
    for frame in frames:
        event = EVENT.validate_python(orjson.loads(frame.data))
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, **extra)
    assert snapshot is not None
    return snapshot  # type: ignore[no-any-return]


def usage(prompt: int, completion: int, cached: int = 0) -> UsageReport:
    return UsageReport(Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached))


async def test_text_stream_in_anthropic_order() -> None:
    frames, _ = await encode(
        [
            usage(25, 0, cached=5),
            TextDelta(ItemKind.MESSAGE, "Hello"),
            TextDelta(ItemKind.MESSAGE, " world"),
            usage(25, 2, cached=5),
            Finished(FinishReason.STOP),
        ]
    )
    assert names(frames) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = orjson.loads(frames[0].data)["message"]
    assert start["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 5,
        "output_tokens": 0,
    }
    assert orjson.loads(frames[1].data) == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert orjson.loads(frames[2].data) == {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hello"},
    }
    delta = orjson.loads(frames[5].data)
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 2 and delta["usage"]["cache_read_input_tokens"] == 5
    message = sdk_message(frames)
    assert message.content[0].type == "text" and message.content[0].text == "Hello world"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 2


async def test_thinking_then_tool_use() -> None:
    frames, accumulator = await encode(
        [
            TextDelta(ItemKind.REASONING, "Need"),
            TextDelta(ItemKind.REASONING, " weather."),
            ToolCallDelta(0, '{"city":', "toolu_1", "get_weather"),
            ToolCallDelta(0, ' "Paris"}'),
            usage(10, 4),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    assert names(frames) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",  # signature_delta, once, just before the stop
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    signature = orjson.loads(frames[4].data)["delta"]
    assert signature["type"] == "signature_delta"
    assert SIGNER.verify("Need weather.", signature["signature"]) == "Need weather."
    tool_start = orjson.loads(frames[6].data)
    assert tool_start["index"] == 1
    assert tool_start["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {},
    }
    assert orjson.loads(frames[7].data)["delta"] == {"type": "input_json_delta", "partial_json": '{"city":'}
    message = sdk_message(frames)
    assert message.stop_reason == "tool_use"
    thinking, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Need weather."
    assert tool.type == "tool_use" and tool.input == {"city": "Paris"}
    # the non-streaming body says the same
    body = message_body(accumulator.result, message_id="msg_1", model="m", signer=SIGNER)
    assert Message.model_validate(body).model_dump() == message.model_dump()


async def test_omitted_thinking_sends_only_the_signature() -> None:
    frames, accumulator = await encode(
        [
            TextDelta(ItemKind.REASONING, "secret"),
            TextDelta(ItemKind.MESSAGE, "ok"),
            Finished(FinishReason.STOP),
        ],
        omit=True,
    )
    deltas = [orjson.loads(f.data)["delta"]["type"] for f in frames if f.event == "content_block_delta"]
    assert deltas == ["signature_delta", "text_delta"]
    message = sdk_message(frames)
    assert message.content[0].type == "thinking" and message.content[0].thinking == ""
    assert SIGNER.verify("", message.content[0].signature) == "secret"
    body = message_body(accumulator.result, message_id="m", model="m", signer=SIGNER, omit_thinking=True)
    assert body["content"][0]["thinking"] == ""


async def test_max_tokens_closes_the_block_then_says_max_tokens() -> None:
    frames, _ = await encode([TextDelta(ItemKind.MESSAGE, "cut"), Finished(FinishReason.LENGTH)])
    assert names(frames)[-4:] == [
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert sdk_message(frames).stop_reason == "max_tokens"


async def test_refusal_is_text_with_stop_reason_refusal() -> None:
    frames, _ = await encode([TextDelta(ItemKind.REFUSAL, "No."), Finished(FinishReason.STOP)])
    assert sdk_message(frames).stop_reason == "refusal"


async def test_failure_mid_tool_call_never_closes_the_call() -> None:
    frames, _ = await encode(
        [TextDelta(ItemKind.MESSAGE, "ok"), ToolCallDelta(0, '{"cmd": "rm', "toolu_9", "Bash")], fail=True
    )
    assert names(frames) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",  # the finished text block
        "content_block_start",
        "content_block_delta",
        "error",  # and nothing after it: no stop for the cut-off call, no message_stop
    ]
    assert orjson.loads(frames[-1].data) == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
    }


async def test_failure_before_any_output_is_one_error_event() -> None:
    frames, _ = await encode([], fail=True)
    assert names(frames) == ["error"]


async def test_server_side_tool_items_are_hidden() -> None:
    provider = ProviderInfo("plugin", "files", "files")
    frames, _ = await encode(
        [
            ToolCallDelta(0, "{}", "call_s", "read_file", provider=provider),
            ToolResult("call_s", "read_file", "content", provider),
            TextDelta(ItemKind.MESSAGE, "done"),
            Finished(FinishReason.STOP),
        ]
    )
    message = sdk_message(frames)
    assert [block.type for block in message.content] == ["text"]
    starts = [orjson.loads(f.data)["index"] for f in frames if f.event == "content_block_start"]
    assert starts == [0]


@pytest.mark.parametrize(
    ("kind", "error_type", "status"),
    [
        (ErrorKind.INVALID_REQUEST, "invalid_request_error", 400),
        (ErrorKind.AUTHENTICATION, "authentication_error", 401),
        (ErrorKind.NOT_FOUND, "not_found_error", 404),
        (ErrorKind.PAYLOAD_TOO_LARGE, "request_too_large", 413),
        (ErrorKind.RATE_LIMITED, "rate_limit_error", 429),
        (ErrorKind.OVERLOADED, "overloaded_error", 529),
        (ErrorKind.ENGINE, "api_error", 500),
    ],
)
def test_error_shape_and_status(kind: ErrorKind, error_type: str, status: int) -> None:
    info = ErrorInfo(kind, "why")
    assert anthropic_error(info) == {"type": "error", "error": {"type": error_type, "message": "why"}}
    assert anthropic_status(info) == status


async def test_failed_event_from_the_core_is_rendered() -> None:
    encoder = AnthropicEncoder("msg_1", "m", SIGNER)
    frames = encoder.encode(Failed(ErrorInfo(ErrorKind.OVERLOADED, "busy")))
    assert orjson.loads(frames[0].data)["error"]["type"] == "overloaded_error"


async def test_frames_waiting_in_an_outbox_cost_their_size_not_orjsons_buffer() -> None:
    """A slow reader's outbox holds every frame it has not read: each Anthropic frame once kept
    orjson's ~4 KiB output buffer (13-17 MB per stalled stream, against 3-6 MB for Chat
    Completions). Per token and per event, a frame now costs about its own length."""
    import tracemalloc

    raw: list[RawEvent] = [TextDelta(ItemKind.REASONING, "hmm ") for _ in range(1000)]
    raw += [TextDelta(ItemKind.MESSAGE, "tok ") for _ in range(1000)]
    raw += [ToolCallDelta(0, call_id="call_1", name="f", arguments='{"a":')]
    raw += [ToolCallDelta(0, arguments="1,") for _ in range(500)]
    raw += [Finished(FinishReason.TOOL_CALLS)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames, _ = await encode(raw)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_frame = held / len(frames)
    assert len(frames) > 2000
    assert per_frame < 1024, f"{per_frame:.0f} bytes held per frame"
