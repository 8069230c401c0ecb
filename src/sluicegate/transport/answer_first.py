"""Waiting for a remote engine's answer before a response's status line goes out.

The transport sends headers at once and heartbeats from then on; for an engine that reaches an
upstream (`Engine.answers_first`), the route first waits — bounded — for the upstream to accept
the request. That way an upstream's refusal before its first byte becomes an HTTP error in the
client's dialect, and the headers can name the replica that serves the request. The client
leaving while we wait cancels the upstream request at once. If the bound passes first, the
response starts as usual (heartbeats flow) and the stream carries on from where it is.

The request's own task steps the engine's stream, as a task would (`step.send`), and waits for
what the step waits on, the client leaving or the bound, whichever comes first: no task of its
own per request (a task and its registration were a measurable part of a request's start).
When the bound passes, the suspended step goes on in whoever reads the stream next; the
progress that came before the answer goes down as one `RawBatch`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, cast

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import (
    Answered,
    Failed,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawBatch,
    RawEvent,
    ReadyEvents,
    ToolsListed,
)
from sluicegate.transport.stream import Sink


def _progress(event: RawEvent) -> bool:
    """What may come before the upstream's answer without being it: progress (`ProgressEvent`'s
    classes), the tool loop's listings. The classes written out: compiled, a tuple named by a
    variable is a generic `PyObject_IsInstance` (~1.2 k instructions each answer's event), one
    written in the call a type compare per class. A new progress event must be named here too
    (tests/unit/transport/test_answer_first.py checks every one of `ProgressEvent`'s)."""
    return isinstance(
        event,
        (LoadStarted, LoadProgress, LoadFinished, PromptStarted, PromptProgress, PromptFinished, ToolsListed),
    )


# A step of an async iterator, driven by hand: `send(None)` runs it to its next suspension and
# returns what it waits on (a future, or None for a bare yield), or raises StopIteration with the
# event (StopAsyncIteration at the stream's end).
Step = Generator[Any, None, RawEvent]


@dataclass(slots=True)
class Opened:
    events: AsyncIterator[RawEvent]
    headers: dict[str, str] = field(default_factory=dict)

    def __init__(self, events: AsyncIterator[RawEvent], headers: dict[str, str] | None = None) -> None:
        # Written out: compiled (core/events.py says why); `headers` a new dict by default.
        self.events = events
        self.headers = {} if headers is None else headers


async def await_answer(
    raw: AsyncIterator[RawEvent],
    *,
    bound: float | None,
    disconnected: Callable[[], Awaitable[object]],
    sink: Sink | None = None,
) -> Opened:
    """Pull `raw` until the engine's `Answered` (whose headers are returned), at most `bound`
    seconds (None: no bound). Raises `SluicegateError` for a `Failed` before the answer (nothing
    was sent yet) and CANCELLED when the client left while waiting. The client's leaving is
    told by the server's `sink` (a call from the connection, `Sink.watch`) when there is one,
    else by `disconnected()` in a task of its own."""
    buffered: list[RawEvent] = []  # a few progress events at most
    wait: _Wait | None = None  # made at the first step that waits: none for what is ready at once
    # What is stepped: `raw`, then, once its first step is taken, what it only passes on when it
    # says so (an instance's admitted stream: `unwrapped`, as `_Resumed` iterates it).
    source, unwrap = raw, True
    try:
        while True:
            # An engine's stream that says what it has ready (the request's start) is asked
            # first: no step, no StopIteration (core/events.py `ReadyEvents`).
            event = source.ready() if isinstance(source, ReadyEvents) else None
            if event is None:
                step: Step = source.__anext__().__await__()
                try:
                    try:
                        waited = step.send(None)
                        while True:  # the step waits on `waited`
                            if wait is None:
                                wait = _Wait(bound, sink, disconnected)
                            try:
                                await wait.until(waited)
                            except asyncio.CancelledError as exc:
                                # As a task's cancel would: the awaited future cancelled, the
                                # step told. The upstream's clocks cancel the waiting task (this
                                # one) and the engine turns that into a `Failed`; any other cancel
                                # comes back out of the step.
                                _cancel(waited)
                                waited = step.throw(exc)
                                continue
                            if waited is None or waited.done():
                                waited = step.send(None)
                            elif wait.gone:
                                _cancel(waited)
                                await _finish(step, waited)
                                await _close(raw)
                                raise SluicegateError(
                                    ErrorKind.CANCELLED, "the client disconnected", code="cancelled"
                                )
                            else:  # the bound passed: start anyway, from where the stream is
                                return Opened(_Resumed(buffered, (step, waited), raw))
                    except StopIteration as stop:
                        event = stop.value
                    except StopAsyncIteration:
                        return Opened(_Resumed(buffered, None, raw))
                except asyncio.CancelledError:  # the server is shutting down
                    await _close(raw)
                    raise
                if unwrap:
                    unwrap = False
                    unwrapped = getattr(raw, "unwrapped", None)
                    if unwrapped is not None:
                        source = unwrapped()
            if _progress(event):
                buffered.append(event)
                continue
            if isinstance(event, Answered):
                return Opened(_Resumed(buffered, None, raw), event.headers)
            if isinstance(event, Failed):
                await _close(raw)
                info = event.error
                raise SluicegateError(info.kind, info.message, param=info.param, code=info.code)
            # An engine that never answers: start at its first output.
            return Opened(_Resumed(buffered, None, raw, event))
    finally:
        if wait is not None:
            wait.close()


class _Wait:
    """The request task's wait on a step: until what the step waits on is done, the client
    leaves (`gone`) or the bound passes (`late`). One per request, made at its first wait."""

    __slots__ = ("_loop", "_sink", "_timer", "_waiter", "_watcher", "gone", "late")

    def __init__(
        self, bound: float | None, sink: Sink | None, disconnected: Callable[[], Awaitable[object]]
    ) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self.gone = False
        self.late = False
        self._timer = loop.call_later(bound, self._late) if bound is not None else None
        self._sink = sink
        self._watcher: asyncio.Future[object] | None = None
        if sink is not None:  # no task per request waiting in `receive`
            if not sink.watch(self._gone):
                self.gone = True
        else:
            self._watcher = watcher = asyncio.ensure_future(disconnected())
            watcher.add_done_callback(self._gone)

    async def until(self, waited: Any) -> None:
        if self.gone or self.late:
            return
        if waited is None:  # a bare yield: the step asks for one turn of the loop
            await asyncio.sleep(0)
            return
        if waited.done():
            return
        self._waiter = waiter = self._loop.create_future()
        waited.add_done_callback(self._wake)
        try:
            await waiter
        finally:
            self._waiter = None
            waited.remove_done_callback(self._wake)

    def _wake(self, _: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _gone(self, _: object = None) -> None:
        self.gone = True
        self._wake()

    def _late(self) -> None:
        self.late = True
        self._wake()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._sink is not None:
            self._sink.unwatch()  # the server's sink: the stream watches it again
        if self._watcher is not None:
            self._watcher.cancel()


def _cancel(waited: Any) -> None:
    if waited is not None and not waited.done():
        waited.cancel()


class _Rest:
    """The rest of a suspended step, in the task that awaits this: first what the step waits
    on (handed to that task, as the step itself would), then the step, to its event. An
    awaitable object, not a generator: compiled (mypyc), a generator is no awaitable."""

    __slots__ = ("_handed", "_step", "_waited")

    def __init__(self, step: Step, waited: Any) -> None:
        self._step = step
        self._waited = waited
        self._handed = False

    def __await__(self) -> Generator[Any, None, RawEvent]:
        return cast("Generator[Any, None, RawEvent]", self)

    def __iter__(self) -> _Rest:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, _: object) -> Any:
        """What the step waits on next; StopIteration with its event once it has one."""
        if not self._handed:
            self._handed = True
            return self._waited
        return self._step.send(None)

    def throw(self, kind: Any, value: Any = None, _traceback: Any = None) -> Any:
        """The awaiting task's cancel (or any exception thrown in): the step is told."""
        return self._step.throw(value if value is not None else kind)

    def close(self) -> None:
        self._step.close()


async def _finish(step: Step, waited: Any) -> None:
    """Run a cancelled step to its end (its cleanup may wait)."""
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
        await _Rest(step, waited)


class _Resumed:
    """The stream after the wait: what came before the answer (one read), the rest of a step
    still in flight, then the engine's own stream, iterated by whoever consumes it next."""

    __slots__ = ("_next", "_pending", "_raw", "_ready")

    def __init__(
        self,
        buffered: list[RawEvent],
        pending: tuple[Step, Any] | None,
        raw: AsyncIterator[RawEvent],
        then: RawEvent | None = None,
    ) -> None:
        # Done futures: awaiting one runs no frame of ours.
        ready: list[asyncio.Future[RawEvent]] = []
        for event in (buffered[0] if len(buffered) == 1 else RawBatch(buffered)) if buffered else None, then:
            if event is not None:
                future: asyncio.Future[RawEvent] = asyncio.get_running_loop().create_future()
                future.set_result(event)
                ready.append(future)
        self._ready = ready
        self._pending = pending  # (the step, what it waits on)
        self._raw = raw  # closed by `aclose`
        # Iterated: what `raw` only passes on, when it says so (an instance's admitted stream).
        unwrapped = getattr(raw, "unwrapped", None)
        self._next: AsyncIterator[RawEvent] = unwrapped() if unwrapped is not None else raw

    def __aiter__(self) -> _Resumed:
        return self

    def __anext__(self) -> Awaitable[RawEvent]:
        ready = self._ready
        if ready:
            return ready.pop(0)
        pending = self._pending
        if pending is not None:
            self._pending = None
            step, waited = pending
            return _Rest(step, waited)
        # Caught up: the inner iterator's own awaitable, no frame of ours per event.
        return self._next.__anext__()

    async def aclose(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:  # never read: the step in flight is cancelled, run to its end
            step, waited = pending
            _cancel(waited)
            await _finish(step, waited)
        await _close(self._raw)


async def _close(raw: AsyncIterator[RawEvent]) -> None:
    aclose = getattr(raw, "aclose", None)
    if aclose is not None:
        await aclose()
