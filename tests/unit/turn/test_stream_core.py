"""The stream core (`turn/stream_core.py`) driven by its two callers: the stream's task
(`TurnPipeline.frames`) and the upstream connection's callback while that task waits (the fast
lane, `TurnPipeline.carry`). Whichever carries a read, the client gets the same frames, and
each step runs once per read (the delta count, the lane's read count)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    PromptProgress,
    RawBatch,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import Frame
from sluicegate.core.pipeline import StreamLimits, stream_deadline
from sluicegate.dialects.anthropic.encoder import AnthropicEncoder
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.base import Encoder
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.engines.lane import Lane
from sluicegate.observe.metrics import METRICS
from sluicegate.transport.stream import Emitter
from sluicegate.turn.pipeline import LANE_READS, TurnPipeline

DELTAS = METRICS.key("sluicegate_engine_deltas_total", model="stream-core-test")

# One stream's reads: text, a tool call in pieces, usage, then the end.
READS: list[list[RawEvent]] = [
    [TextDelta(ItemKind.REASONING, "Let me"), TextDelta(ItemKind.REASONING, " think.")],
    [TextDelta(ItemKind.MESSAGE, "Hello")],
    [TextDelta(ItemKind.MESSAGE, ", wörld"), TextDelta(ItemKind.MESSAGE, ' "q"\n')],
    [ToolCallDelta(0, '{"city"', "call_1", "weather")],
    [ToolCallDelta(0, ': "Paris"}')],
    [UsageReport(Usage(prompt_tokens=7, completion_tokens=6))],
    [Finished(FinishReason.TOOL_CALLS)],
]
N_DELTAS = sum(type(e) in (TextDelta, ToolCallDelta) for read in READS for e in read)


class Wire(Emitter):
    """The transport as the lane sees it (`transport.stream.Emitter`); the task's frames are
    appended here too, so `frames` is everything in the order the client gets it."""

    def __init__(self, producer: asyncio.Task[object]) -> None:
        self.producer = producer
        self.ready = True
        self.frames: list[Frame] = []
        self.emitted = 0

    def emit(self, frames: list[Frame], now: float = 0.0) -> None:
        self.emitted += 1
        self.frames += frames


def chat_encoder(_: Accumulator) -> Encoder:
    return ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=True, logprobs=False)


def anthropic_encoder(_: Accumulator) -> Encoder:
    return AnthropicEncoder("msg_1", "m", ThinkingSigner(b"k" * 32))


async def run(
    make_encoder: type | object, *, carried: set[int], lane_on: bool = True
) -> tuple[list[bytes], Wire, list[str]]:
    """Stream READS through a pipeline; the reads numbered in `carried` arrive while the task
    waits, and are offered to the lane first (what `_ReadThrough` does in the connection's
    callback). Returns the frames' bytes, the wire and what carried each read."""
    task = asyncio.current_task()
    assert task is not None
    wire = Wire(task)
    lane = Lane() if lane_on else None
    how: list[str] = []

    async def engine() -> AsyncIterator[RawEvent]:
        for i, read in enumerate(READS):
            carrier = lane.carrier if lane is not None else None
            if (
                i in carried
                and carrier is not None
                and carrier.carry(list(read), asyncio.current_task(), 0.0)
            ):
                how.append("lane")
                continue
            how.append("task")
            yield RawBatch(read) if len(read) > 1 else read[0]

    accumulator = Accumulator()
    encoder = make_encoder(accumulator)  # type: ignore[operator]
    pipeline = TurnPipeline(
        engine(),
        encoder,
        accumulator,
        deadline=stream_deadline(StreamLimits()),
        deltas=METRICS.cell(DELTAS) if lane is not None else None,
        lane=lane,
    )
    pipeline.open()
    pipeline.bind(wire)
    async for frames in pipeline.frames():
        wire.frames += frames
    pipeline.bind(None)
    assert lane is None or lane.carrier is None
    return [f.data for f in wire.frames], wire, how


@pytest.mark.parametrize("make_encoder", [chat_encoder, anthropic_encoder])
async def test_both_drivers_make_the_same_frames(make_encoder: object) -> None:
    alone, _, how = await run(make_encoder, carried=set(), lane_on=False)
    assert set(how) == {"task"}
    reads, deltas = METRICS.count(LANE_READS), METRICS.count(DELTAS)
    every_other, wire, how = await run(make_encoder, carried={0, 2, 4, 5})
    assert how == ["lane", "task", "lane", "task", "lane", "lane", "task"]
    assert wire.emitted >= 3  # the text and tool reads; a usage read may render nothing yet
    assert every_other == alone
    # Each read counted once, whichever driver pushed it.
    assert METRICS.count(LANE_READS) - reads == 4
    assert METRICS.count(DELTAS) - deltas == N_DELTAS
    all_lane, _, how = await run(make_encoder, carried=set(range(len(READS))))
    assert how == ["lane"] * (len(READS) - 1) + ["task"]  # the end is the task's
    assert all_lane == alone


async def test_the_lane_refuses_what_the_task_must_take() -> None:
    task = asyncio.current_task()
    assert task is not None
    lane = Lane()

    async def engine() -> AsyncIterator[RawEvent]:
        carrier = lane.carrier
        assert carrier is not None
        carry = carrier.carry
        text = [TextDelta(ItemKind.MESSAGE, "a")]
        # Anything that is not a delta or usage: the end, a failure, progress.
        assert not carry([*text, Finished(FinishReason.STOP)], task, 0.0)
        assert not carry([Failed(ErrorInfo(ErrorKind.UPSTREAM, "x"))], task, 0.0)
        assert not carry([PromptProgress(0.5)], task, 0.0)
        # A wait that is not the stream's own task (the answer-first wait), a transport behind.
        assert not carry(text, None, 0.0)
        wire.ready = False
        assert not carry(text, task, 0.0)
        wire.ready = True
        assert wire.emitted == 0
        assert carry(text, task, 0.0)
        assert wire.emitted == 1
        yield TextDelta(ItemKind.MESSAGE, "b")

    wire = Wire(task)
    accumulator = Accumulator()
    pipeline = TurnPipeline(engine(), chat_encoder(accumulator), accumulator, lane=lane)
    pipeline.bind(wire)
    async for _frames in pipeline.frames():
        pass
    assert wire.emitted == 1
    assert not pipeline.carry([TextDelta(ItemKind.MESSAGE, "late")], task, 0.0)  # the turn has ended
    assert wire.emitted == 1


async def test_a_failure_read_by_the_task_ends_the_stream_after_what_came_before() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "kept")
        yield RawBatch([TextDelta(ItemKind.MESSAGE, " too"), Failed(ErrorInfo(ErrorKind.UPSTREAM, "broke"))])
        yield TextDelta(ItemKind.MESSAGE, " never read")

    accumulator = Accumulator()
    pipeline = TurnPipeline(engine(), chat_encoder(accumulator), accumulator)
    data = b"".join([f.data async for frames in pipeline.frames() for f in frames])
    assert b"kept" in data and b" too" in data and b"never read" not in data
    assert accumulator.result.error is not None and accumulator.result.error.message == "broke"
