"""core/deadlines.py: request deadline and idle timeout end the stream and cancel the engine,
as the stream's read loop (`core/segmenter.py` `Reads`) and its per-read step (`Segments.push`,
which every driver of the stream core takes) apply them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorKind
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    PromptProgress,
    RawEvent,
    TextDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.pipeline import StreamLimits, canonical_events
from sluicegate.core.segmenter import Reads, Segments

LIMIT = 10  # seconds: a safety net so a broken timeout fails the test instead of hanging it


class Engine:
    """A fake engine that records how it ended."""

    def __init__(self, events: list[RawEvent], *, gap: float = 0.0, then_sleep: float = 0.0) -> None:
        self.events = events
        self.gap = gap
        self.then_sleep = then_sleep
        self.log: list[str] = []

    async def run(self) -> AsyncIterator[RawEvent]:
        try:
            for event in self.events:
                if self.gap:
                    await asyncio.sleep(self.gap)
                yield event
            if self.then_sleep:
                await asyncio.sleep(self.then_sleep)
                self.log.append("woke up")
            self.log.append("done")
        except asyncio.CancelledError:
            self.log.append("cancelled")
            raise
        except GeneratorExit:
            self.log.append("closed")
            raise


async def drain(stream: AsyncIterator[Event] | AsyncIterator[RawEvent]) -> list:
    async with asyncio.timeout(LIMIT):
        return [event async for event in stream]


async def guarded(
    raw: AsyncIterator[RawEvent], *, deadline_seconds: float | None, idle_seconds: float | None
) -> list[RawEvent]:
    """The raw events as the stream's task reads them under the limits, each read taking the
    core's step (its clock restarts the idle timer)."""
    deadline = Deadline.of(deadline_seconds, idle_seconds)
    segments = Segments(deadline)
    out: list[RawEvent] = []
    async with asyncio.timeout(LIMIT):
        reads = Reads(raw, deadline)
        while (event := await reads.next()) is not None:
            segments.push(event, [])
            out.append(event)
    return out


def forever() -> AsyncIterator[RawEvent]:
    async def gen() -> AsyncIterator[RawEvent]:
        while True:
            await asyncio.sleep(0.01)
            yield TextDelta(ItemKind.MESSAGE, "x")

    return gen()


async def test_events_pass_through_untouched_without_limits() -> None:
    events: list[RawEvent] = [
        TextDelta(ItemKind.MESSAGE, "a"),
        PromptProgress(0.5),
        Finished(FinishReason.STOP),
    ]
    engine = Engine(events)
    out = await guarded(engine.run(), deadline_seconds=None, idle_seconds=None)
    assert len(out) == 3 and all(a is b for a, b in zip(out, events, strict=True))
    assert engine.log == ["done"]


async def test_events_pass_through_untouched_within_limits() -> None:
    events: list[RawEvent] = [TextDelta(ItemKind.MESSAGE, str(i)) for i in range(5)]
    engine = Engine(events, gap=0.01)
    out = await guarded(engine.run(), deadline_seconds=30, idle_seconds=5)
    assert len(out) == 5 and all(a is b for a, b in zip(out, events, strict=True))
    assert engine.log == ["done"]


async def test_deadline_ends_with_timeout_and_cancels_the_engine() -> None:
    engine = Engine([TextDelta(ItemKind.MESSAGE, "a")], then_sleep=30)
    out = await guarded(engine.run(), deadline_seconds=0.2, idle_seconds=None)
    assert out[0] == TextDelta(ItemKind.MESSAGE, "a")
    assert len(out) == 2
    failed = out[-1]
    assert isinstance(failed, Failed)
    assert failed.error.kind is ErrorKind.TIMEOUT
    assert "0.2s" in failed.error.message
    assert engine.log == ["cancelled"]


async def test_deadline_applies_even_when_the_engine_keeps_talking() -> None:
    out = await guarded(forever(), deadline_seconds=0.2, idle_seconds=5)
    assert len(out) > 1  # it did stream for a while
    assert isinstance(out[-1], Failed) and out[-1].error.kind is ErrorKind.TIMEOUT


async def test_idle_timeout_ends_with_idle_timeout_and_cancels_the_engine() -> None:
    engine = Engine([TextDelta(ItemKind.MESSAGE, "a"), TextDelta(ItemKind.MESSAGE, "b")], then_sleep=30)
    out = await guarded(engine.run(), deadline_seconds=30, idle_seconds=0.15)
    assert [e.text for e in out[:2]] == ["a", "b"]
    failed = out[-1]
    assert isinstance(failed, Failed)
    assert failed.error.kind is ErrorKind.IDLE_TIMEOUT
    assert "0.15s" in failed.error.message
    assert engine.log == ["cancelled"]


async def test_idle_timeout_before_the_first_event() -> None:
    engine = Engine([], then_sleep=30)
    out = await guarded(engine.run(), deadline_seconds=None, idle_seconds=0.1)
    assert len(out) == 1 and isinstance(out[0], Failed) and out[0].error.kind is ErrorKind.IDLE_TIMEOUT
    assert engine.log == ["cancelled"]


async def test_each_event_resets_the_idle_clock() -> None:
    # 8 events 0.25s apart take ~2s in all, twice a 1s idle limit that no single gap comes near
    # (a gap would have to stretch 4x on a loaded machine to trip it)
    events: list[RawEvent] = [TextDelta(ItemKind.MESSAGE, str(i)) for i in range(8)]
    engine = Engine(events, gap=0.25)
    out = await guarded(engine.run(), deadline_seconds=None, idle_seconds=1.0)
    assert not any(isinstance(e, Failed) for e in out)
    assert len(out) == 8


async def test_the_earlier_limit_decides_the_kind() -> None:
    engine = Engine([], then_sleep=30)
    out = await guarded(engine.run(), deadline_seconds=0.1, idle_seconds=20)
    assert isinstance(out[-1], Failed) and out[-1].error.kind is ErrorKind.TIMEOUT


async def test_closing_early_closes_the_engine() -> None:
    engine = Engine([TextDelta(ItemKind.MESSAGE, "a"), TextDelta(ItemKind.MESSAGE, "b")])
    stream = Reads(engine.run(), Deadline.of(5, 5))
    await stream.next()
    await stream.aclose()
    assert engine.log == ["closed"]


async def test_canonical_events_leave_the_cut_off_item_open_then_fail_on_timeout() -> None:
    engine = Engine([TextDelta(ItemKind.MESSAGE, "partial")], then_sleep=30)
    limits = StreamLimits(request_timeout_seconds=None, idle_timeout_seconds=0.1)
    out = await drain(canonical_events(engine.run(), limits))
    assert not any(isinstance(e, ItemDone) for e in out)  # cut off: never reported done
    assert isinstance(out[-3], ItemDelta) and out[-3].item.text_so_far == "partial"
    assert out[-3].item.cut_short
    # the engine never got to report usage: what streamed before the deadline is counted
    assert out[-2] == UsageReport(Usage(completion_tokens=1))
    assert isinstance(out[-1], Failed) and out[-1].error.kind is ErrorKind.IDLE_TIMEOUT
    assert sum(isinstance(e, Failed | Finished) for e in out) == 1
    assert engine.log == ["cancelled"]
