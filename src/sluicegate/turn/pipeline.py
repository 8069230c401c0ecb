"""One response: its engine's raw events → the stream core → the dialect's frames.

The same pipeline serves a stream (`frames`) and a non-streaming answer (`collect`), so the
two can never disagree. Its read loop is the stream core's task driver (`turn/stream_core.py`);
a stream given a fast lane (`engines/lane.py`) is driven by the upstream connection's callback
too, while the task waits (`carry`): the same core, the same frames. It keeps one promise for every dialect: a stored turn is written
before the frames that say it is done (`response.completed`, `chat.end`, the body) leave, so a
client that saw "completed" can always read it back.

A turn ends one of three ways, each persisted once: its terminal event (Finished/Failed);
`cancel(reason)` from outside (`/cancel`, DELETE, shutdown), after which the stream still ends
with the dialect's own frames for a cancelled response; or `abandon(reason)` when its consumer
is gone (a client that disconnected), which only records what was generated.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import Failed, RawEvent, TextDelta, ToolCallDelta, UsageReport
from sluicegate.core.frames import Frame
from sluicegate.core.segmenter import Reads
from sluicegate.core.tasks import task_of
from sluicegate.dialects.base import Encoder
from sluicegate.engines.carrier import Carrier, Lane
from sluicegate.observe.metrics import METRICS
from sluicegate.observe.requests import EventTap
from sluicegate.observe.series import Value
from sluicegate.transport.stream import Emitter
from sluicegate.turn.stream_core import StreamCore

log = logging.getLogger(__name__)

# The fast lane; off with SLUICEGATE_FAST_LANE=0: every read takes the task (the tests compare).
LANE_ENABLED = os.environ.get("SLUICEGATE_FAST_LANE", "1") != "0"
LANE_READS = METRICS.key("sluicegate_fast_lane_reads_total")
# Bound once: a carried read adds to an attribute (`Final`, compiled: a C static, no dict lookup).
_LANE_READS: Final = METRICS.cell(LANE_READS)

# Persist the turn: (cancel reason or None, the frames that end it) → durable.
Persist = Callable[[str | None, list[Frame]], Awaitable[None]]


class TurnPipeline(Carrier):
    __slots__ = (
        "_emitter",
        "_lane",
        "_opening",
        "_task",
        "accumulator",
        "cancel_reason",
        "core",
        "deadline",
        "encoder",
        "ended",
        "events",
        "persist",
        "tap",
    )

    def __init__(
        self,
        events: AsyncIterator[RawEvent],
        encoder: Encoder,
        accumulator: Accumulator,
        persist: Persist | None = None,
        tap: EventTap | None = None,
        *,
        deadline: Deadline | None = None,
        deltas: Value | None = None,
        lane: Lane | None = None,
    ) -> None:
        """`events`: the engine's raw events; `deadline`: the stream's request and idle limits;
        `lane`: the fast lane the engine was given (then `deltas`, the model's delta counter,
        is counted here: see `turn/stream_core.py`)."""
        self.events = events
        self.tap = tap  # metrics and the access line, called per event (no generator layer)
        self.encoder = encoder
        self.accumulator = accumulator
        self.deadline = deadline
        self.core = StreamCore(encoder, accumulator, tap, deadline, deltas)
        self.persist = persist
        self.ended = False
        self.cancel_reason: str | None = None
        self._task: asyncio.Task[object] | None = None
        self._opening: list[Frame] | None = None
        self._lane = lane
        self._emitter: Emitter | None = None

    def open(self) -> None:
        """Encode the opening frames now, before anything is sent: a failure here is still an
        HTTP error in the dialect's shape, not a broken stream."""
        self._opening = self.encoder.opening()

    def _take_opening(self) -> list[Frame]:
        # Not kept once sent: orjson's output holds a 4 KiB buffer or more however short it is,
        # and a stream lives long.
        opening, self._opening = self._opening, None
        return opening if opening is not None else self.encoder.opening()

    async def _end(self, reason: str | None, frames: list[Frame]) -> list[Frame]:
        """Persist the turn; returns the frames that may say so. When the record cannot be
        written, a turn that was about to say "completed" ends failed instead."""
        self.ended = True
        if self.persist is None:
            return frames
        try:
            await asyncio.shield(self.persist(reason, frames))
            return frames
        except SluicegateError as exc:  # the store is unavailable: a 503 a client may retry
            log.warning("storing a turn failed: %s", exc)
            info = exc.info
        except Exception:
            log.exception("storing a turn failed")
            info = ErrorInfo(ErrorKind.INTERNAL, "The response could not be stored; it was not saved.")
        if reason is not None:
            return frames  # cancelled: nothing claims the record exists
        failed = Failed(info, unstored=True)
        self.accumulator.feed(failed)
        try:
            return self.encoder.encode(failed)
        except Exception:
            log.exception("encoding a storage failure failed")
            return []

    def fail(self, info: ErrorInfo) -> None:
        """The turn's consumer failed it from outside (its state could not be written): the
        response object says so too, with the same error the store is given."""
        if self.ended:
            return
        self.ended = True
        failed = Failed(info)
        self.accumulator.feed(failed)
        try:
            self.encoder.encode(failed)
        except Exception:
            log.exception("encoding a failure failed")

    def _internal_failure(self) -> list[Frame]:
        failed = Failed(
            ErrorInfo(ErrorKind.INTERNAL, "The server had an error while processing your request.")
        )
        self.accumulator.feed(failed)
        return self.encoder.encode(failed)

    def _owned_cancel(self) -> str | None:
        """The reason when the current cancellation is ours (`cancel`), not the consumer's."""
        task, reason = self._task, self.cancel_reason
        return reason if reason is not None and task is not None and task.uncancel() == 0 else None

    def frames(self) -> Frames:
        """The stream: opening frames, one list per read that renders, the ending (`Frames`)."""
        return Frames(self)

    def bind(self, emitter: Emitter | None) -> None:
        """The stream's transport runs (`emitter`), or has stopped (None): the fast lane is
        open while it runs."""
        self._emitter = emitter
        lane = self._lane
        if lane is not None:
            lane.carrier = self if emitter is not None else None

    def carry(self, batch: list[RawEvent], task: asyncio.Task[object] | None, now: float) -> bool:
        """The fast lane's driver (`Lane.carrier`): a read pushed through the core in the
        upstream connection's callback, its frames handed to the transport; False, with
        nothing changed, when the task must take it — a read with anything but deltas and
        usage (the end, a failure, progress), a transport that is behind, a wait that is not
        the stream's own task, a turn that is ending."""
        emitter = self._emitter
        if (
            emitter is None
            or task is not emitter.producer
            or not emitter.ready
            or self.ended
            or self.cancel_reason is not None
        ):
            return False
        for event in batch:
            kind = type(event)
            if kind is not TextDelta and kind is not ToolCallDelta and kind is not UsageReport:
                return False
        frames = self.core.push_read(batch, now)
        if frames:
            emitter.emit(frames, now)
        _LANE_READS.inc(1.0)
        return True

    async def collect(self) -> ChatResult:
        """Run the turn to its end for a non-streaming answer: the stream's own loop (so the two
        can never disagree), its frames unused — the encoder's state is the body of some
        dialects, and the accumulator's is the result."""
        async for _frames in Frames(self):
            pass
        return self.accumulator.result

    def hand_over(self) -> None:
        """The stream goes on in another task (a background run's): until that task resumes it,
        a cancel only records its reason, which the stream checks first thing."""
        self._task = None

    def cancel(self, reason: str) -> None:
        """Stop the turn from outside; it ends with the dialect's frames for a cancel."""
        if self.ended or self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def abandon(self, reason: str) -> None:
        """The consumer is gone before the end: record what was generated, once."""
        if not self.ended:
            await self._end(reason, self.encoder.cancelled(reason))


# Where a turn's stream is (`Frames`): each step goes on from here.
_NEW = 0  # not started
_OPENED = 1  # the opening frames handed out
_READING = 2  # one step per read that renders
_FINISHING = 3  # the frames before the ending handed out: the turn is persisted next
_ENDING = 4  # the last frames handed out: the next step closes and stops
_OVER = 5  # closed (`_close` ran)


class Frames:
    """A turn's stream (`TurnPipeline.frames`): the opening frames, one list per read that
    renders (the stream's task driving the core), the ending — persisted before the frames that
    say it is done. A turn cancelled from outside (`TurnPipeline.cancel`) ends with the
    dialect's frames for a cancel; an encoder's bug, with its own failure.

    An async iterator object, not an async generator, so that it is compiled with what reads it
    (the stream's transport) and what it reads (`Reads`, the engine's relay). What the
    generator's `finally` did is `_close`, run once on every path: the end, an exception out of a
    step (the client left), `aclose()` by its owner. Closed before its first step, nothing ran
    and it does nothing."""

    __slots__ = ("_events", "_final", "_pipeline", "_state", "_tapping")

    def __init__(self, pipeline: TurnPipeline) -> None:
        self._pipeline = pipeline
        self._state = _NEW
        self._events: Reads | None = None
        self._tapping = False  # the tap started: it ends with the stream
        self._final: list[Frame] = []  # (while _FINISHING) the ending's frames, to persist

    def __aiter__(self) -> Frames:
        return self

    async def __anext__(self) -> list[Frame]:
        state = self._state
        if state >= _ENDING:
            if state == _ENDING:
                await self._close()
            raise StopAsyncIteration
        pipeline = self._pipeline
        try:
            try:
                if state == _NEW:
                    return self._open(pipeline)
                if state == _FINISHING:
                    frames, self._final = self._final, []
                    return await self._finish(pipeline, frames)
                # A step of the stream's reads, inlined: a coroutine less per read.
                if state == _OPENED:
                    # A background run takes its opening in the request's task and goes on in its own.
                    pipeline._task = task_of(asyncio.get_running_loop())
                    if pipeline.cancel_reason is not None:
                        raise asyncio.CancelledError
                    tap = pipeline.tap
                    if tap is not None:
                        tap.start()
                        self._tapping = True
                    self._state = _READING
                core, events = pipeline.core, self._events
                assert events is not None
                if not _failed(core):  # (a failure ends the reads, after its read's frames)
                    push = core.push
                    while (event := await events.next()) is not None:
                        frames = push(event)
                        if frames:
                            return frames
                        if _failed(core):
                            break
                await events.aclose()  # the engine closed and the deadline disarmed before the end
                before, frames = core.finish()
                if before:
                    self._state = _FINISHING
                    self._final = frames
                    return before
                return await self._finish(pipeline, frames)
            except asyncio.CancelledError:
                reason = pipeline._owned_cancel()
                if reason is None:
                    raise
                frames = await pipeline._end(reason, pipeline.encoder.cancelled(reason))
                self._state = _ENDING
                return [*frames, *pipeline.encoder.closing()]
            except Exception:  # an encoder bug: still end the stream in the dialect's own way
                log.exception("encoding a response failed")
                if pipeline.ended:
                    await self._close()
                    raise StopAsyncIteration from None
                frames = await pipeline._end(None, pipeline._internal_failure())
                self._state = _ENDING
                return [*frames, *pipeline.encoder.closing()]
        except BaseException:
            await self._close()
            raise

    def _open(self, pipeline: TurnPipeline) -> list[Frame]:
        pipeline._task = task_of(asyncio.get_running_loop())
        self._events = Reads(pipeline.events, pipeline.deadline)
        if pipeline.cancel_reason is not None:  # cancelled before it started
            raise asyncio.CancelledError
        self._state = _OPENED
        return pipeline._take_opening()

    async def _finish(self, pipeline: TurnPipeline, frames: list[Frame]) -> list[Frame]:
        frames = await pipeline._end(None, frames)
        self._state = _ENDING
        return [*frames, *pipeline.encoder.closing()]

    async def aclose(self) -> None:
        if self._state == _NEW:
            self._state = _OVER
            return
        await self._close()

    async def _close(self) -> None:
        if self._state == _OVER:
            return
        self._state = _OVER
        if self._tapping:
            self._tapping = False
            tap = self._pipeline.tap
            assert tap is not None
            tap.end()
        events = self._events
        if events is not None:
            await events.aclose()


def _failed(core: StreamCore) -> bool:
    """The core's failure ended the stream. A call, not `core.failure` tested in place: mypy
    keeps an attribute narrowed to None across an `await`, and mypyc compiled that as a type
    check (a read that failed raised `TypeError`)."""
    return core.failure is not None
