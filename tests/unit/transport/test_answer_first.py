"""transport/answer_first.py: waiting (bounded) for a remote engine's answer before the status line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from loop_support import settled
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import (
    Answered,
    Failed,
    ItemKind,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
)
from sluicegate.transport.answer_first import await_answer


class Engine:
    """A raw stream: `events`, with `gate` (if set) awaited before the answer."""

    def __init__(self, *events: RawEvent, gate: asyncio.Event | None = None) -> None:
        self.events = events
        self.gate = gate
        self.closed = False
        self.cancelled = False

    async def run(self) -> AsyncIterator[RawEvent]:
        try:
            for event in self.events:
                if isinstance(event, Answered) and self.gate is not None:
                    await self.gate.wait()
                yield event
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.closed = True


async def never() -> None:
    await asyncio.Event().wait()


async def drain(events: AsyncIterator[RawEvent]) -> list[RawEvent]:
    return [e async for e in events]


TEXT = TextDelta(ItemKind.MESSAGE, "hi")


async def test_the_answer_gives_headers_and_the_events_before_it_are_replayed() -> None:
    engine = Engine(PromptStarted(), Answered({"X-Replica": "a"}), TEXT)
    opened = await await_answer(engine.run(), bound=1.0, disconnected=never)
    assert opened.headers == {"X-Replica": "a"}
    assert await drain(opened.events) == [PromptStarted(), TEXT]


async def test_a_failure_before_the_answer_is_raised_and_the_stream_closed() -> None:
    engine = Engine(PromptStarted(), Failed(ErrorInfo(ErrorKind.RATE_LIMITED, "slow down")), TEXT)
    with pytest.raises(SluicegateError) as caught:
        await await_answer(engine.run(), bound=1.0, disconnected=never)
    assert caught.value.info.kind is ErrorKind.RATE_LIMITED and engine.closed


async def test_when_the_bound_passes_the_stream_carries_on_from_where_it_is() -> None:
    gate = asyncio.Event()
    engine = Engine(PromptStarted(), Answered({"X-Replica": "a"}), TEXT, gate=gate)
    opened = await await_answer(engine.run(), bound=0.05, disconnected=never)
    assert opened.headers == {}
    gate.set()
    assert await drain(opened.events) == [PromptStarted(), Answered({"X-Replica": "a"}), TEXT]


async def test_the_client_leaving_cancels_the_engine_at_once() -> None:
    gone = asyncio.Event()
    engine = Engine(PromptStarted(), Answered({}), gate=asyncio.Event())
    waiting = asyncio.ensure_future(await_answer(engine.run(), bound=None, disconnected=gone.wait))
    await settled()  # waiting for the answer that never comes
    assert not waiting.done()
    gone.set()
    with pytest.raises(SluicegateError) as caught:
        await waiting
    assert caught.value.info.kind is ErrorKind.CANCELLED
    assert engine.cancelled and engine.closed


async def test_engines_that_never_answer_start_at_their_first_output() -> None:
    engine = Engine(PromptStarted(), TEXT)
    opened = await await_answer(engine.run(), bound=None, disconnected=never)
    assert opened.headers == {} and await drain(opened.events) == [PromptStarted(), TEXT]


async def test_progress_after_the_bound_passed_is_delivered_as_it_comes() -> None:
    """Once the stream is handed over, progress is not held back until the answer."""
    later = asyncio.Event()

    async def run() -> AsyncIterator[RawEvent]:
        yield PromptStarted()
        await asyncio.sleep(0.1)  # past the bound
        yield PromptProgress(0.5)
        await later.wait()
        yield Answered({})
        yield TEXT

    opened = await await_answer(run(), bound=0.05, disconnected=never)
    events = opened.events
    assert await anext(events) == PromptStarted()
    assert await asyncio.wait_for(anext(events), 1) == PromptProgress(0.5)  # before `later`
    later.set()
    assert await drain(events) == [Answered({}), TEXT]
