"""An engine's events one by one, for tests that drive `generate` directly."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sluicegate.core.events import Finished, RawBatch, RawEvent, TextDelta, Usage, UsageReport
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


async def checked_reply(engine: Engine, request: ChatRequest) -> tuple[str, Usage]:
    """The request checked, then run: its text and its last usage report."""
    engine.check(request)
    text, usage = "", Usage()
    async for event in engine_events(engine, request):
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, UsageReport):
            usage = event.usage
    return text, usage


class Reply:
    """What a run came to: its text, finish reason (and stop word) and last usage report."""

    def __init__(self) -> None:
        self.text = ""
        self.finish: str | None = None  # the finish reason's value
        self.stop_word: str | None = None
        self.usage = Usage()


async def run_reply(engine: Engine, request: ChatRequest) -> Reply:
    """The request checked, then run to its end."""
    engine.check(request)
    reply = Reply()
    async for event in engine_events(engine, request):
        if isinstance(event, TextDelta):
            reply.text += event.text
        elif isinstance(event, Finished):
            reply.finish, reply.stop_word = event.reason.value, event.stop_word
        elif isinstance(event, UsageReport):
            reply.usage = event.usage
    return reply
