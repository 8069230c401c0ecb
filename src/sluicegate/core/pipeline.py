"""The path every request takes from engine to dialect, composed once.

engine raw events → deadlines → segmentation → canonical events, for a consumer without an
encoder (a compaction). A turn's stream drives the same steps through its stream core
(`sluicegate/turn/stream_core.py`), which encodes each read's events too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import Event, EventBatch, RawEvent
from sluicegate.core.segment import segment

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamLimits:
    heartbeat_seconds: float = 15.0
    request_timeout_seconds: float | None = 600.0
    idle_timeout_seconds: float | None = 120.0


def canonical_events(raw: AsyncIterator[RawEvent], limits: StreamLimits) -> AsyncIterator[Event]:
    # The deadlines run in the segmenter's loop, not as a generator layer of their own.
    return segment(raw, stream_deadline(limits))


def stream_deadline(limits: StreamLimits) -> Deadline | None:
    return Deadline.of(limits.request_timeout_seconds, limits.idle_timeout_seconds)


async def collect(events: AsyncIterator[Event], accumulator: Accumulator | None = None) -> ChatResult:
    """Run a stream to its end for a non-streaming response."""
    accumulator = accumulator or Accumulator()
    async for event in events:
        if type(event) is EventBatch:
            for inner in event.events:
                accumulator.feed(inner)
        else:
            accumulator.feed(event)
    return accumulator.result


async def unless_disconnected(work: Awaitable[T], wait_for_disconnect: Callable[[], Awaitable[object]]) -> T:
    """Await `work`, cancelling it the moment the client goes away (non-streaming requests)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise SluicegateError(ErrorKind.CANCELLED, "the client disconnected", code="cancelled")
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
