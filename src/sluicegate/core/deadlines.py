"""Request deadline and idle timeout, applied to an engine's raw events.

When either passes, the engine is cancelled (it observes `CancelledError` at its current await)
and the stream ends with a `Failed` event, which every dialect renders as its own terminal
error frames. Heartbeats are not events, so they never reset the idle clock; any engine event
does (prompt-processing progress included: a model busy with a long prompt is not stuck).

One timer per stream, not one per event: an event only records the time, and the timer, when
it fires early, re-arms itself for the real due time. That keeps the per-token cost to a clock
read (a per-event `asyncio.timeout` measured as most of the pipeline's cost).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import Failed, RawEvent


async def with_deadlines(
    raw: AsyncIterator[RawEvent], *, deadline_seconds: float | None, idle_seconds: float | None
) -> AsyncIterator[RawEvent]:
    if not deadline_seconds and not idle_seconds:
        async for event in raw:
            yield event
        return
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    hard_at = loop.time() + deadline_seconds if deadline_seconds else math.inf
    idle = idle_seconds or math.inf
    last = loop.time()
    expired: ErrorKind | None = None
    handle: asyncio.TimerHandle | None = None

    def check() -> None:
        nonlocal handle, expired
        now = loop.time()
        due = min(hard_at, last + idle)
        if now < due:
            handle = loop.call_at(due, check)
            return
        expired = ErrorKind.TIMEOUT if hard_at <= last + idle else ErrorKind.IDLE_TIMEOUT
        task.cancel()

    handle = loop.call_at(min(hard_at, last + idle), check)
    clock = loop.time
    try:
        try:
            async for event in raw:
                last = clock()
                yield event
        except asyncio.CancelledError:
            if expired is None or task.uncancel() > 0:
                raise  # a real cancellation (client gone), not our timer
    finally:
        handle.cancel()
        aclose = getattr(raw, "aclose", None)
        if aclose is not None:
            await aclose()
    if expired is ErrorKind.TIMEOUT:
        yield Failed(
            ErrorInfo(expired, f"Request timed out after {deadline_seconds:g}s (request_timeout_seconds).")
        )
    elif expired is ErrorKind.IDLE_TIMEOUT:
        yield Failed(
            ErrorInfo(expired, f"No output from the model for {idle_seconds:g}s (idle_timeout_seconds).")
        )
