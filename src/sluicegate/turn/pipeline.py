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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import Failed, RawBatch, RawEvent, TextDelta, ToolCallDelta, UsageReport
from sluicegate.core.frames import Frame
from sluicegate.core.segment import reads
from sluicegate.dialects.base import Encoder
from sluicegate.engines.lane import Lane
from sluicegate.observe.metrics import METRICS, Key
from sluicegate.observe.requests import EventTap
from sluicegate.transport.stream import Emitter
from sluicegate.turn.stream_core import StreamCore

log = logging.getLogger(__name__)

# The fast lane; off with SLUICEGATE_FAST_LANE=0: every read takes the task (the tests compare).
LANE_ENABLED = os.environ.get("SLUICEGATE_FAST_LANE", "1") != "0"
LANE_READS = METRICS.key("sluicegate_fast_lane_reads_total")

# Persist the turn: (cancel reason or None, the frames that end it) → durable.
Persist = Callable[[str | None, list[Frame]], Awaitable[None]]


class TurnPipeline:
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
        deltas: Key | None = None,
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

    def _owned_cancel(self) -> bool:
        """True when the current cancellation is ours (`cancel`), not the consumer's."""
        task = self._task
        return self.cancel_reason is not None and task is not None and task.uncancel() == 0

    async def frames(self) -> AsyncGenerator[list[Frame], None]:
        """The stream: opening frames, one list per read that renders, the ending."""
        encoder, core = self.encoder, self.core
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task(loop)
        tap = self.tap
        tapping = False
        events = reads(self.events, self.deadline)
        try:
            if self.cancel_reason is not None:  # cancelled before it started
                raise asyncio.CancelledError
            yield self._take_opening()
            # A background run yields its opening in the request's task and goes on in its own.
            self._task = asyncio.current_task(loop)  # (the loop held: no getpid, as every lookup costs)
            if self.cancel_reason is not None:
                raise asyncio.CancelledError
            if tap is not None:
                tap.start()
                tapping = True
            push = core.push
            async for event in events:
                frames = push(event)
                if frames:
                    yield frames
                    frames = []  # sent: not held while the next read is awaited
                if core.failure is not None:
                    break
            await events.aclose()  # the engine closed and the deadline disarmed before the end
            before, frames = core.finish()
            if before:
                yield before
            frames = await self._end(None, frames)
            yield [*frames, *encoder.closing()]
        except asyncio.CancelledError:
            if not self._owned_cancel():
                raise
            assert self.cancel_reason is not None
            frames = await self._end(self.cancel_reason, encoder.cancelled(self.cancel_reason))
            yield [*frames, *encoder.closing()]
        except Exception:  # an encoder bug: still end the stream in the dialect's own way
            log.exception("encoding a response failed")
            if not self.ended:
                frames = await self._end(None, self._internal_failure())
                yield [*frames, *encoder.closing()]
        finally:
            if tapping:
                tap.end()  # type: ignore[union-attr]
            await events.aclose()

    def bind(self, emitter: Emitter | None) -> None:
        """The stream's transport runs (`emitter`), or has stopped (None): the fast lane is
        open while it runs."""
        self._emitter = emitter
        lane = self._lane
        if lane is not None:
            lane.deliver = self.carry if emitter is not None else None

    def carry(self, batch: list[RawEvent], task: asyncio.Task[object] | None) -> bool:
        """The fast lane's driver (`Lane.deliver`): a read pushed through the core in the
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
        frames = self.core.push(RawBatch(batch))
        if frames:
            emitter.emit(frames)
        METRICS.counters[LANE_READS] += 1
        return True

    async def collect(self) -> ChatResult:
        """Run the turn to its end for a non-streaming answer: the stream's own loop (so the two
        can never disagree), its frames unused — the encoder's state is the body of some
        dialects, and the accumulator's is the result."""
        async for _frames in self.frames():
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
