"""What arrives in one upstream read travels as one batch: the segmenter turns a RawBatch into one
EventBatch, the pipeline into one list of frames, and the result is the same stream of frames a
token-by-token relay gives. The byte-level fast paths (SSE frames, per-token chunks) agree with
the general parser on every input, and refuse what is not a plain token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    EventBatch,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemKind,
    RawBatch,
    RawEvent,
    TextDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import Frame
from sluicegate.core.segment import segment
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.engines.upstream.wire import ChunkDecoder, SSEReader, _PlainChunks
from sluicegate.transport.sse import _list_bytes
from sluicegate.turn.pipeline import TurnPipeline

WORDS = [" sluice", " gate", ' wa"ter', " \u00e9", " <b>"]


async def _events(events: list[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


def _tokens() -> list[RawEvent]:
    return [TextDelta(ItemKind.MESSAGE, w) for w in WORDS]


async def _frames(raw: list[RawEvent]) -> list[list[bytes]]:
    encoder = ChatCompletionsEncoder("chatcmpl-1", 1, "m", include_usage=True, logprobs=False)
    pipeline = TurnPipeline(_events(raw), encoder, Accumulator())
    return [[f.data for f in frames] async for frames in pipeline.frames()]


async def test_a_batch_is_one_step_and_the_same_frames() -> None:
    tail: list[RawEvent] = [
        UsageReport(Usage(prompt_tokens=3, completion_tokens=5)),
        Finished(FinishReason.STOP),
    ]
    one_by_one = await _frames([*_tokens(), *tail])
    batched = await _frames([RawBatch(_tokens()), *tail])
    flat = [data for frames in one_by_one for data in frames]
    assert [data for frames in batched for data in frames] == flat
    assert len(batched) < len(one_by_one)
    assert batched[0] == []  # Chat Completions opens with nothing
    assert len(batched[1]) == len(WORDS) + 1  # the role chunk and every token, in one list


async def test_the_segmenter_yields_one_event_batch_per_raw_batch() -> None:
    out = [e async for e in segment(_events([RawBatch(_tokens()), Finished(FinishReason.STOP)]))]
    assert type(out[0]) is EventBatch
    deltas = [e for e in out[0].events if type(e) is ItemDelta]
    assert [d.text for d in deltas] == WORDS
    assert not any(type(e) in (Finished, Failed) for e in out[0].events)
    assert type(out[-1]) is Finished


async def test_a_failure_inside_a_batch_ends_the_stream_after_what_came_before() -> None:
    error = Failed(ErrorInfo(ErrorKind.UPSTREAM, "broke"))
    raw: list[RawEvent] = [RawBatch([*_tokens()[:2], error, TextDelta(ItemKind.MESSAGE, " lost")])]
    out = [e async for e in segment(_events(raw))]
    deltas = [e.text for e in out if type(e) is ItemDelta]
    assert deltas == WORDS[:2]
    assert type(out[-1]) is Failed


def _chunk(text: str, model: str = "m") -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
        }
    )


@pytest.mark.parametrize("text", [*WORDS, "", "\\", "}]}", '"},"x":1'])
def test_the_plain_chunk_path_reads_what_orjson_reads(text: str) -> None:
    plain = _PlainChunks()
    data = _chunk(text)
    assert plain.text(data) == text
    assert plain.text(data) == text  # the cached head and tail


@pytest.mark.parametrize(
    "data",
    [
        _chunk("a").replace(b'"id"', b'"usage":{"prompt_tokens":1},"id"'),
        _chunk("a").replace(b'"id"', b'"error":{"message":"x"},"id"'),
        _chunk("a").replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
        _chunk("a").replace(b'"logprobs":null', b'"logprobs":{"content":[]}'),
        _chunk("a")[:-1] + b',"usage":{"prompt_tokens":1}}',
    ],
)
def test_anything_more_than_a_token_takes_the_general_path(data: bytes) -> None:
    plain = _PlainChunks()
    plain.text(_chunk("warm"))  # a cached head and tail must not let these through either
    assert plain.text(data) is None


def test_the_decoder_gives_the_same_events_either_way() -> None:
    fast, general = ChunkDecoder(), ChunkDecoder()
    for word in WORDS:
        data = _chunk(word)
        assert fast.frame(None, data) == general.frame(None, data + b" ")  # trailing space: no fast path


@pytest.mark.parametrize(
    "chunks",
    [
        [b'data: {"a":1}\n\ndata: {"b":2}\n\n'],
        [b'data: {"a":1}\n\n: comment\n\ndata: [DONE]\n\n'],
        [b'event: error\ndata: {"a":1}\n\n'],
        [b'data: {"a":', b'1}\n\ndata: {"b":2}\n\n'],
        [b'data: {"a":1}\r\n\r\n'],
        [b'data:{"a":1}\n\n'],
        [b"data: x\ndata: y\n\n"],
    ],
)
def test_the_sse_fast_path_agrees_with_the_line_parser(chunks: list[bytes]) -> None:
    reader = SSEReader()
    got = [frame for chunk in chunks for frame in reader.feed(chunk)]
    slow = SSEReader()
    slow._tail = b""  # the general path, byte by byte
    expected = [frame for chunk in chunks for b in chunk for frame in slow.feed(bytes([b]))]
    assert got == expected and got


def test_a_list_of_frames_is_written_as_one_buffer() -> None:
    from sluicegate.core.frames import Frame

    frames = [Frame(b"{}"), Frame(b"[1]", "x.delta"), Frame(b"2")]
    assert _list_bytes(frames) == b"data: {}\n\nevent: x.delta\ndata: [1]\n\ndata: 2\n\n"


async def test_the_opening_frames_are_not_kept_once_sent() -> None:
    # orjson's output holds a buffer of 4 KiB or more whatever its length: a stream that kept
    # its opening frames held that for its whole life.
    # A dialect with opening frames (Responses, Anthropic); a wrapper, not a subclass: the
    # encoder may be compiled (docs/compiled.md), and Python classes cannot extend those.
    class Opening:
        def __init__(self) -> None:
            self.inner = ChatCompletionsEncoder("chatcmpl-1", 1, "m", include_usage=True, logprobs=False)

        def opening(self) -> list[Frame]:
            return [Frame(orjson.dumps({"type": "response.created"}), "response.created")]

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    encoder = Opening()
    pipeline = TurnPipeline(_events(_tokens()), encoder, Accumulator())
    pipeline.open()
    frames = pipeline.frames()
    opening = await anext(frames)
    assert opening and pipeline._opening is None
    await frames.aclose()


async def test_a_stream_closed_midway_disarms_its_deadline_and_closes_the_engine() -> None:
    """`Frames.aclose` is what the generator's `finally` was: closed after a read (the client
    left), the deadline's alarm is disarmed and the engine's stream closed, by the stream
    itself (the turn's owner closes the engine too, but nothing else disarms the deadline)."""
    closed: list[bool] = []

    async def endless() -> AsyncIterator[RawEvent]:
        try:
            while True:
                yield TextDelta(ItemKind.MESSAGE, "x")
        finally:
            closed.append(True)

    encoder = ChatCompletionsEncoder("chatcmpl-1", 1, "m", include_usage=True, logprobs=False)
    deadline = Deadline(30, 30)
    frames = TurnPipeline(endless(), encoder, Accumulator(), deadline=deadline).frames()
    await anext(frames)  # the opening
    await anext(frames)  # a read: the deadline is armed
    assert deadline._handle is not None
    await frames.aclose()
    assert deadline._handle is None and closed == [True]
    with pytest.raises(StopAsyncIteration):
        await anext(frames)
