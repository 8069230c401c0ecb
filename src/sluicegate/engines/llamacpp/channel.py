"""Events from a worker thread to one async consumer, handed over in batches.

The producer never waits. The consumer's loop is woken once per batch, not once per event:
when the model outpaces the client, tokens pile up and cross in one go, and `put` pays only a
lock and an append (no syscall) while the consumer is busy.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Channel(Generic[T]):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None

    def put(self, items: Iterable[T]) -> None:
        """Producer side (any thread)."""
        with self._lock:
            self._items.extend(items)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)

    def close(self) -> None:
        """Producer side: nothing more will come."""
        with self._lock:
            self._closed = True
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)

    async def batches(self) -> AsyncIterator[list[T]]:
        """Consumer side: everything put so far, in order, until closed and drained."""
        while True:
            with self._lock:
                items, self._items = self._items, []
                closed = self._closed
                if not items and not closed:
                    self._waiter = waiter = self._loop.create_future()
            if items:
                yield items
            elif closed:
                return
            else:
                await waiter
