"""Request deadline and idle timeout, applied to an engine's raw events.

When either passes, the engine is cancelled (it observes `CancelledError` at its current await)
and the stream ends with a `Failed` event, which every dialect renders as its own terminal
error frames. Heartbeats are not events, so they never reset the idle clock.
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
    hard_at = loop.time() + deadline_seconds if deadline_seconds else math.inf
    try:
        while True:
            idle_at = loop.time() + idle_seconds if idle_seconds else math.inf
            try:
                async with asyncio.timeout_at(min(hard_at, idle_at)):
                    event = await anext(raw)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if hard_at <= idle_at:
                    info = ErrorInfo(
                        ErrorKind.TIMEOUT,
                        f"Request timed out after {deadline_seconds:g}s (request_timeout_seconds).",
                    )
                else:
                    info = ErrorInfo(
                        ErrorKind.IDLE_TIMEOUT,
                        f"No output from the model for {idle_seconds:g}s (idle_timeout_seconds).",
                    )
                yield Failed(info)
                return
            yield event
    finally:
        aclose = getattr(raw, "aclose", None)
        if aclose is not None:
            await aclose()
