"""An engine's events one by one, for tests that drive `generate` directly."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sluicegate.core.events import RawBatch, RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import Engine


async def engine_events(engine: Engine, request: ChatRequest) -> AsyncIterator[RawEvent]:
    """The engine's events one by one (it hands over what one wake-up carries as a RawBatch);
    the stream is closed however the caller stops reading."""
    stream = engine.generate(request)
    try:
        async for received in stream:
            for event in received.events if isinstance(received, RawBatch) else [received]:
                yield event
    finally:
        await stream.aclose()
