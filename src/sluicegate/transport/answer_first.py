"""Waiting for a remote engine's answer before a response's status line goes out.

The transport sends headers at once and heartbeats from then on; for an engine that reaches an
upstream (`Engine.answers_first`), the route first waits — bounded — for the upstream to accept
the request. That way an upstream's refusal before its first byte becomes an HTTP error in the
client's dialect, and the headers can name the replica that serves the request. The client
leaving while we wait cancels the upstream request at once. If the bound passes first, the
response starts as usual (heartbeats flow) and the stream carries on from where it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_args

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import Answered, Failed, ProgressEvent, RawEvent, ToolsListed
from sluicegate.transport.stream import Sink

# What may come before the upstream's answer without being it: progress, the tool loop's listings.
_PROGRESS = (*get_args(ProgressEvent), ToolsListed)


async def _next(raw: AsyncIterator[RawEvent]) -> RawEvent | None:
    try:
        return await raw.__anext__()
    except StopAsyncIteration:
        return None


class _Puller:
    """Pulls progress into `buffered` until the first other event (or the end), which it
    returns; once `handed_over`, it returns the next event whatever it is. One task for the
    whole wait, not one per event: an upstream request yields two progress events before its
    answer, and a task and an `asyncio.wait` each were a measurable part of a request's cost."""

    __slots__ = ("buffered", "handed_over", "raw")

    def __init__(self, raw: AsyncIterator[RawEvent], buffered: list[RawEvent]) -> None:
        self.raw = raw
        self.buffered = buffered
        self.handed_over = False

    async def pull(self) -> RawEvent | None:
        while True:
            event = await _next(self.raw)
            if self.handed_over or event is None or not isinstance(event, _PROGRESS):
                return event
            self.buffered.append(event)


class _Resumed:
    """The stream after the wait: the events pulled meanwhile, then the one in flight, then
    the rest, iterated by whoever consumes it next."""

    __slots__ = ("_buffered", "_pending", "_raw")

    def __init__(
        self,
        buffered: list[RawEvent],
        pending: asyncio.Future[RawEvent | None] | None,
        raw: AsyncIterator[RawEvent],
    ) -> None:
        self._buffered = buffered
        self._pending = pending
        self._raw = raw

    def __aiter__(self) -> _Resumed:
        return self

    def __anext__(self) -> Awaitable[RawEvent]:
        # Once caught up, the inner iterator's own awaitable: no frame of ours per event.
        if self._buffered or self._pending is not None:
            return self._catch_up()
        return self._raw.__anext__()

    async def _catch_up(self) -> RawEvent:
        if self._buffered:
            return self._buffered.pop(0)
        assert self._pending is not None
        pending, self._pending = self._pending, None
        event = await pending  # cancelling the consumer cancels this too
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)
            self._pending = None
        aclose = getattr(self._raw, "aclose", None)
        if aclose is not None:
            await aclose()


@dataclass(slots=True)
class Opened:
    events: AsyncIterator[RawEvent]
    headers: dict[str, str] = field(default_factory=dict)


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
    buffered: list[RawEvent] = []  # a few progress events at most: a list, not a deque (760 B)
    puller = _Puller(raw, buffered)
    if sink is not None:  # no task per request waiting in `receive`
        watcher: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if not sink.watch(_Gone(watcher)):
            watcher.set_result(None)
    else:
        watcher = asyncio.ensure_future(disconnected())
    pending = asyncio.ensure_future(puller.pull())
    try:
        try:
            await _first_done(pending, watcher, bound)
        except asyncio.CancelledError:  # the server is shutting down
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            await _close(raw)
            raise
        if pending.done():
            event = pending.result()
            if isinstance(event, Answered):
                return Opened(_Resumed(buffered, None, raw), event.headers)
            if isinstance(event, Failed):
                await _close(raw)
                info = event.error
                raise SluicegateError(info.kind, info.message, param=info.param, code=info.code)
            if event is not None:  # an engine that never answers: start at its first output
                buffered.append(event)
            return Opened(_Resumed(buffered, None, raw))
        if watcher.done():
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            await _close(raw)
            raise SluicegateError(ErrorKind.CANCELLED, "the client disconnected", code="cancelled")
        puller.handed_over = True  # the bound passed: start anyway, from where the stream is
        return Opened(_Resumed(buffered, pending, raw))
    finally:
        if sink is not None:
            sink.unwatch()  # the server's sink: the stream watches it again
        watcher.cancel()


class _Gone:
    """The sink's call when the client leaves while the answer is awaited."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[object]) -> None:
        self.future = future

    def __call__(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


async def _first_done(a: asyncio.Future[Any], b: asyncio.Future[Any], timeout: float | None) -> None:
    """Return once `a` or `b` is done, or `timeout` seconds passed: `asyncio.wait` with
    FIRST_COMPLETED for two tasks, without what it does per call besides (a set built and
    checked for coroutines, every member passed through `ensure_future`). Once per request."""
    if a.done() or b.done():
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    a.add_done_callback(wake)
    b.add_done_callback(wake)
    timer = loop.call_later(timeout, wake, None) if timeout is not None else None
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        a.remove_done_callback(wake)
        b.remove_done_callback(wake)


async def _close(raw: AsyncIterator[RawEvent]) -> None:
    aclose = getattr(raw, "aclose", None)
    if aclose is not None:
        await aclose()
