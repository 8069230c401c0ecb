"""Events from a worker thread to one async consumer, handed over in batches.

The producer never waits. The consumer's loop is woken once per batch, not once per event:
when the model outpaces the client, tokens pile up and cross in one go, and `put` pays only a
lock and an append (no syscall) while the consumer is busy.

With `Wakeups`, many channels fed by one producer share one wake-up: the batching scheduler
fills every running sequence's channel in a step, then wakes the loop once for all of them,
right before its next `llama_decode` releases the GIL. Each wake-up is a syscall (a self-pipe
or eventfd write) and a loop iteration, and with plain asyncio the write releases the GIL, so
the woken loop can hold the producer up: one per step instead of one per sequence and step.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _wake_all(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


class Wakeups:
    """Wake-ups gathered on the producer's thread until `flush`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> None:
        with self._lock:
            self._pending.setdefault(loop, []).append(waiter)

    def flush(self) -> None:
        """Wake every consumer with something new: one call per loop (producer's thread)."""
        if not self._pending:
            return
        with self._lock:
            pending, self._pending = self._pending, {}
        for loop, waiters in pending.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_wake_all, waiters)


class Channel(Generic[T]):
    def __init__(self, loop: asyncio.AbstractEventLoop, wakeups: Wakeups | None = None) -> None:
        self._loop = loop
        self._wakeups = wakeups  # None: `put` wakes the consumer itself
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._closed = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def _notify(self, waiter: asyncio.Future[None]) -> None:
        if self._wakeups is not None:
            self._wakeups.add(self._loop, waiter)
        else:
            self._loop.call_soon_threadsafe(_wake, waiter)

    def put(self, items: Iterable[T]) -> None:
        """Producer side (any thread)."""
        with self._lock:
            self._items.extend(items)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._notify(waiter)

    def fail(self, error: BaseException) -> None:
        """Producer side: the consumer raises `error` after what was put before it (then `close`)."""
        with self._lock:
            self._error = error

    def close(self) -> None:
        """Producer side: nothing more will come."""
        with self._lock:
            self._closed = True
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._notify(waiter)

    async def batches(self) -> AsyncIterator[list[T]]:
        """Consumer side: everything put so far, in order, until closed and drained; then the
        producer's error, if it failed."""
        while True:
            with self._lock:
                items, self._items = self._items, []
                closed = self._closed
                if not items and not closed:
                    self._waiter = waiter = self._loop.create_future()
            if items:
                yield items
            elif closed:
                if self._error is not None:
                    raise self._error
                return
            else:
                await waiter
