"""transport/answer_first.py: waiting (bounded) for a remote engine's answer before the status line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, get_args

import pytest

from loop_support import settled
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import (
    Answered,
    Failed,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    ProgressEvent,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawBatch,
    RawEvent,
    ReadyEvents,
    TextDelta,
    ToolsListed,
)
from sluicegate.core.request import ProviderInfo
from sluicegate.transport.answer_first import _progress, await_answer


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
        self.watched = 0
        self.unwatched = 0

    def watch(self, lost: Callable[[], None]) -> bool:
        self.watched += 1
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
    # Ready at once: nothing waited, so the sink was never watched (and is left unwatched).
    assert opened.headers == {"X-Replica": "a"} and sink.watched == sink.unwatched and sink.lost is None
    sink = WatchedSink()
    gate = asyncio.Event()
    engine = Engine(PromptStarted(), Answered({"X-Replica": "b"}), gate=gate)
    waiting = asyncio.ensure_future(
        await_answer(engine.run(), bound=1.0, disconnected=never, sink=sink)  # type: ignore[arg-type]
    )
    await settled()
    assert sink.lost is not None
    gate.set()
    assert (await waiting).headers == {"X-Replica": "b"}
    assert sink.watched == sink.unwatched == 1 and sink.lost is None  # the stream may watch it next
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


async def test_the_wait_runs_in_the_callers_task_with_no_task_of_its_own() -> None:
    """The engine's steps run in the request's own task: no puller task per request."""
    gate = asyncio.Event()
    seen: set[asyncio.Task[object] | None] = set()

    async def run() -> AsyncIterator[RawEvent]:
        seen.add(asyncio.current_task())
        yield PromptStarted()
        seen.add(asyncio.current_task())
        await gate.wait()
        seen.add(asyncio.current_task())
        yield Answered({"X-Replica": "a"})
        yield TEXT

    sink = WatchedSink()
    waiting = asyncio.ensure_future(
        await_answer(run(), bound=5.0, disconnected=never, sink=sink)  # type: ignore[arg-type]
    )
    await settled()
    assert len(asyncio.all_tasks()) == 2  # this test's and the waiting request's: no other
    gate.set()
    opened = await waiting
    assert seen == {waiting}
    assert opened.headers == {"X-Replica": "a"}
    assert await drain(opened.events) == [PromptStarted(), TEXT]


async def test_progress_before_the_answer_comes_as_one_read() -> None:
    engine = Engine(PromptStarted(), PromptProgress(0.0), Answered({"X-Replica": "a"}), TEXT)
    opened = await await_answer(engine.run(), bound=1.0, disconnected=never)
    assert await drain(opened.events) == [RawBatch([PromptStarted(), PromptProgress(0.0)]), TEXT]


async def test_a_cancel_of_the_waiting_task_reaches_the_engine_which_may_answer_it() -> None:
    """The upstream's clocks cancel the task that waits on the upstream (now the request's own)
    and the engine turns that into a `Failed`: the wait raises it, the task is not left
    cancelled. Any other cancel comes back out, the engine closed."""
    timeout = ErrorInfo(ErrorKind.TIMEOUT, "no first byte", code="upstream_first_byte_timeout")

    async def run(owned: bool) -> AsyncIterator[RawEvent]:
        yield PromptStarted()
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)  # the clocks' timer
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if not owned or task.uncancel() != 0:
                raise
            yield Failed(timeout)
            return
        yield Answered({})

    with pytest.raises(SluicegateError) as caught:
        await await_answer(run(owned=True), bound=5.0, disconnected=never)
    assert caught.value.info.code == "upstream_first_byte_timeout"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    cancelled = asyncio.ensure_future(await_answer(run(owned=False), bound=5.0, disconnected=never))
    with pytest.raises(asyncio.CancelledError):
        await cancelled


async def test_a_semaphore_the_engine_waits_on_is_left_whole_when_the_client_leaves() -> None:
    """Cancelling the step cancels what it waits on first, as a task's cancel does: an engine
    queued on a semaphore gives no slot back that it never had."""
    slots = asyncio.Semaphore(1)
    await slots.acquire()  # taken: the engine queues

    async def run() -> AsyncIterator[RawEvent]:
        yield PromptStarted()
        async with slots:
            yield Answered({})

    sink = WatchedSink()
    waiting = asyncio.ensure_future(
        await_answer(run(), bound=None, disconnected=never, sink=sink)  # type: ignore[arg-type]
    )
    await settled()
    assert sink.lost is not None
    sink.lost()
    with pytest.raises(SluicegateError):
        await waiting
    assert slots.locked()  # still the one holder: the queued engine took nothing
    slots.release()
    assert not slots.locked()


async def test_a_stream_that_only_passes_steps_on_is_iterated_beneath_and_closed_itself() -> None:
    """An instance's admitted stream, once started, only passes its generator's steps on
    (`unwrapped`): from the wait's second step on that is read directly, and the wrapper is
    still closed."""
    inner = Engine(PromptStarted(), Answered({"X-Replica": "a"}), TEXT).run()

    class Wrapper:
        closed = False
        steps = 0

        def __aiter__(self) -> Wrapper:
            return self

        def __anext__(self) -> Any:
            self.steps += 1
            return inner.__anext__()

        def unwrapped(self) -> AsyncIterator[RawEvent]:
            return inner

        async def aclose(self) -> None:
            self.closed = True
            await inner.aclose()

    wrapper = Wrapper()
    opened = await await_answer(wrapper, bound=1.0, disconnected=never)
    assert await drain(opened.events) == [PromptStarted(), TEXT]
    assert wrapper.steps == 1  # the first step, which starts it; the rest, the wait's too, beneath it
    await opened.events.aclose()  # type: ignore[attr-defined]
    assert wrapper.closed


# What may come before the answer (`_progress`): the classes it writes out (for the compiled
# build's cheap type compares) are every progress event's and the tool loop's listings. Was an
# import-time `assert` (gone under `python -O`, paid by every import).

_ONE_OF_EACH: dict[type, RawEvent] = {
    LoadStarted: LoadStarted("instance"),
    LoadProgress: LoadProgress(0.5),
    LoadFinished: LoadFinished(1.0),
    PromptStarted: PromptStarted(),
    PromptProgress: PromptProgress(0.5),
    PromptFinished: PromptFinished(),
}


@pytest.mark.parametrize("cls", get_args(ProgressEvent), ids=lambda c: c.__name__)
def test_every_progress_event_may_come_before_the_answer(cls: type) -> None:
    assert cls in _ONE_OF_EACH, f"a new progress event: add one {cls.__name__} here"
    assert _progress(_ONE_OF_EACH[cls])


def test_the_tool_loops_listing_may_come_before_the_answer_and_nothing_else() -> None:
    assert _progress(ToolsListed(ProviderInfo("ephemeral_mcp", "docs", "docs"), []))
    for other in (Answered({}), TEXT, RawBatch([TEXT]), Failed(ErrorInfo(ErrorKind.UPSTREAM, "x"))):
        assert not _progress(other), other


def ready_stream(ready: list[RawEvent], stepped: list[RawEvent]) -> Any:
    """A stream with its start ready (`ReadyEvents`): those events handed out without a step,
    the rest stepped; `steps` counts the steps (`__anext__` calls). Pure build only: compiled,
    `ReadyEvents` is native and an interpreted class cannot subclass it (the relay's own is
    tested in both: tests/unit/engines/test_upstream_body_end.py)."""
    if not hasattr(ReadyEvents.ready, "__code__"):
        pytest.skip("compiled: an interpreted class cannot subclass the native ReadyEvents")

    class Ready(ReadyEvents):
        def __init__(self) -> None:
            self.queued, self.stepped, self.steps = ready, stepped, 0

        def ready(self) -> RawEvent | None:
            return self.queued.pop(0) if self.queued else None

        def __aiter__(self) -> Ready:
            return self

        async def __anext__(self) -> RawEvent:
            self.steps += 1
            await asyncio.sleep(0)  # a step that waits, as the upstream's answer does
            if not self.stepped:
                raise StopAsyncIteration
            return self.stepped.pop(0)

        async def aclose(self) -> None:
            pass

    return Ready()


async def test_a_stream_that_says_what_it_has_ready_is_not_stepped_for_it() -> None:
    engine = ready_stream([PromptStarted(), PromptProgress(0.0)], [Answered({"X-Replica": "a"}), TEXT])
    opened = await await_answer(engine, bound=1.0, disconnected=never)
    assert opened.headers == {"X-Replica": "a"}
    assert engine.steps == 1  # the answer's step only
    assert await drain(opened.events) == [RawBatch([PromptStarted(), PromptProgress(0.0)]), TEXT]


async def test_a_ready_failure_is_raised_and_a_ready_first_output_starts_the_stream() -> None:
    failing = ready_stream([PromptStarted(), Failed(ErrorInfo(ErrorKind.UPSTREAM, "no"))], [])
    with pytest.raises(SluicegateError):
        await await_answer(failing, bound=1.0, disconnected=never)
    assert failing.steps == 0
    direct = ready_stream([TEXT], [])
    opened = await await_answer(direct, bound=1.0, disconnected=never)
    assert await drain(opened.events) == [TEXT] and direct.steps == 1  # (its end)
