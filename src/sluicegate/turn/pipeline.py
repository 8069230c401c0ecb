"""One response's canonical events → the accumulator and the dialect's frames.

The same pipeline serves a stream (`frames`) and a non-streaming answer (`collect`), so the
two can never disagree. It keeps one promise for every dialect: a stored turn is written
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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import Event, EventBatch, Failed, Finished
from sluicegate.core.frames import Frame
from sluicegate.dialects.base import Encoder
from sluicegate.observe.requests import EventTap

log = logging.getLogger(__name__)

# Persist the turn: (cancel reason or None, the frames that end it) → durable.
Persist = Callable[[str | None, list[Frame]], Awaitable[None]]


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


class TurnPipeline:
    __slots__ = (
        "_opening",
        "_task",
        "accumulator",
        "cancel_reason",
        "encoder",
        "ended",
        "events",
        "persist",
        "tap",
    )

    def __init__(
        self,
        events: AsyncIterator[Event],
        encoder: Encoder,
        accumulator: Accumulator,
        persist: Persist | None = None,
        tap: EventTap | None = None,
    ) -> None:
        self.events = events
        self.tap = tap  # metrics and the access line, called per event (no generator layer)
        self.encoder = encoder
        self.accumulator = accumulator
        self.persist = persist
        self.ended = False
        self.cancel_reason: str | None = None
        self._task: asyncio.Task[object] | None = None
        self._opening: list[Frame] | None = None

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
        """The stream: opening frames, one list per event (or batch of events) that renders, the
        ending."""
        encoder, feed, encode = self.encoder, self.accumulator.feed, self.encoder.encode
        self._task = asyncio.current_task()
        tap = self.tap
        tapping = False
        try:
            if self.cancel_reason is not None:  # cancelled before it started
                raise asyncio.CancelledError
            yield self._take_opening()
            # A background run yields its opening in the request's task and goes on in its own.
            self._task = asyncio.current_task()
            if self.cancel_reason is not None:
                raise asyncio.CancelledError
            if tap is not None:
                tap.start()
                tapping = True
            async for event in self.events:
                if type(event) is EventBatch:  # one upstream read: one list of frames out
                    frames = []
                    for inner in event.events:  # never a terminal event (see EventBatch)
                        if tap is not None:
                            tap.see(inner)
                        feed(inner)
                        frames += encode(inner)
                    if frames:
                        yield frames
                    continue
                if tap is not None:
                    tap.see(event)
                feed(event)
                frames = encode(event)
                kind = type(event)
                if kind is Finished or kind is Failed:
                    frames = await self._end(None, frames)
                    yield [*frames, *encoder.closing()]
                    return
                if frames:
                    yield frames
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
            await _close(self.events)

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
