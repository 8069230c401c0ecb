"""A Responses generation as a task of its own, independent of any HTTP connection.

Every `POST /v1/responses` becomes a `ResponseRun`: it feeds the canonical stream to the one
accumulator and the Responses encoder, writes every event frame to a replayable log, and
stores the result when it ends — completed, failed, or cancelled with what was generated.
Streaming clients follow the log; a foreground client that leaves cancels the run, a
background run keeps going until it finishes or `/cancel` stops it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import Event, Failed
from sluicegate.dialects.responses import ResponsesEncoder
from sluicegate.store.base import Store, StoredResponse
from sluicegate.transport.replay import FrameLog

log = logging.getLogger(__name__)
Json = dict[str, Any]


@dataclass(slots=True)
class Conversation:
    input_items: list[Json]  # this request's own input items (for input_items listing)
    history: list[Json]  # everything before this turn's output, resolved


class ResponseRun:
    def __init__(
        self,
        events: AsyncIterator[Event],
        encoder: ResponsesEncoder,
        accumulator: Accumulator,
        conversation: Conversation,
        *,
        store: Store | None,
        retention_seconds: float,
        runs: dict[str, ResponseRun],
        on_end: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.id = encoder.state.id
        self.events = events
        self.encoder = encoder
        self.accumulator = accumulator
        self.conversation = conversation
        self.background = encoder.state.request.background
        self.store = store
        self.retention_seconds = retention_seconds
        self.runs = runs
        self.on_end = on_end  # releases what the run held (a request's MCP sessions)
        self.log = FrameLog()
        self.cancel_reason = "cancelled"
        self.task: asyncio.Task[None] | None = None
        self._started = False
        self._cancel_early = False  # cancelled before the task first ran

    def start(self) -> None:
        self.runs[self.id] = self
        self.log.extend(self.encoder.opening(queued=self.background))
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"response {self.id}")

    def cancel(self, reason: str) -> None:
        if self.task is None or self.task.done():
            return
        self.cancel_reason = reason
        if self._started:
            self.task.cancel()
        else:
            # Cancelling a task that never ran would skip its finally (never stored, never
            # removed from the runs in flight): let it start and stop itself instead.
            self._cancel_early = True

    @property
    def finished(self) -> bool:
        return self.task is not None and self.task.done()

    def snapshot(self) -> Json:
        return self.encoder.final or self.encoder.snapshot()

    async def wait(self) -> Json:
        if self.task is not None:
            await asyncio.shield(self.task)
        return self.snapshot()

    async def _run(self) -> None:
        encoder, feed, frames = self.encoder, self.accumulator.feed, self.log
        self._started = True
        try:
            if self._cancel_early:
                raise asyncio.CancelledError
            frames.extend(encoder.in_progress())
            async for event in self.events:
                feed(event)
                frames.extend(encoder.encode(event))
        except asyncio.CancelledError:
            frames.extend(encoder.cancelled(self.cancel_reason))
        except Exception:  # the pipeline ends streams itself; this is a bug, never a lost response
            log.exception("response run %s failed", self.id)
            frames.extend(encoder.encode(Failed(ErrorInfo(ErrorKind.INTERNAL, "internal server error"))))
        finally:
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:
                    log.exception("closing the event stream of %s failed", self.id)
            try:
                await self._persist()
            finally:
                frames.close()
                self.runs.pop(self.id, None)
                if self.on_end is not None:
                    try:
                        await self.on_end()
                    except Exception:
                        log.exception("releasing what response %s held failed", self.id)

    async def _persist(self) -> None:
        if self.store is None or not self.encoder.state.request.store:
            return
        events = list(self.log.frames) if self.background else None
        record = stored_turn(self.snapshot(), self.conversation, self.retention_seconds, events)
        try:
            await self.store.put(record)
        except Exception:
            log.exception("storing response %s failed", self.id)


def stored_turn(
    response: Json, conversation: Conversation, retention_seconds: float, events: list[bytes] | None = None
) -> StoredResponse:
    """The store record of one finished turn, whichever dialect produced it."""
    now = time.time()
    return StoredResponse(
        id=response["id"],
        response=response,
        input_items=conversation.input_items,
        conversation=[*conversation.history, *response["output"]],
        created_at=now,
        expires_at=now + retention_seconds,
        events=events or [],
    )
