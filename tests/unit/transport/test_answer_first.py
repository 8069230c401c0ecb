"""transport/answer_first.py: waiting (bounded) for a remote engine's answer before the status line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

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


class WatchedSink:
    """The server's sink as the answer wait uses it: `watch` keeps the call, `unwatch` drops it."""

    def __init__(self, gone: bool = False) -> None:
        self.lost: Callable[[], None] | None = None
        self.gone = gone
        self.unwatched = 0

    def watch(self, lost: Callable[[], None]) -> bool:
        if self.gone:
            return False
        self.lost = lost
        return True

    def unwatch(self) -> None:
        self.lost = None
        self.unwatched += 1


async def test_with_the_servers_sink_the_client_leaving_cancels_without_a_watcher_task() -> None:
    sink = WatchedSink()
    engine = Engine(PromptStarted(), Answered({}), gate=asyncio.Event())
    waiting = asyncio.ensure_future(
        await_answer(engine.run(), bound=None, disconnected=never, sink=sink)  # type: ignore[arg-type]
    )
    await settled()
    assert not waiting.done()
    assert sink.lost is not None  # the connection's call, not a task waiting in `receive`
    sink.lost()
    with pytest.raises(SluicegateError) as caught:
        await waiting
    assert caught.value.info.kind is ErrorKind.CANCELLED
    assert engine.cancelled and engine.closed
    assert sink.lost is None and sink.unwatched == 1  # the stream may watch it next


async def test_with_the_servers_sink_an_answer_unwatches_it_and_a_client_already_gone_cancels() -> None:
    sink = WatchedSink()
    opened = await await_answer(
        Engine(Answered({"X-Replica": "a"}), TEXT).run(),
        bound=1.0,
        disconnected=never,
        sink=sink,  # type: ignore[arg-type]
    )
    assert opened.headers == {"X-Replica": "a"} and sink.unwatched == 1 and sink.lost is None
    engine = Engine(PromptStarted(), Answered({}), gate=asyncio.Event())
    with pytest.raises(SluicegateError) as caught:
        await await_answer(engine.run(), bound=None, disconnected=never, sink=WatchedSink(gone=True))  # type: ignore[arg-type]
    assert caught.value.info.kind is ErrorKind.CANCELLED


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
