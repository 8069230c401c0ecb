"""The `Sink` (transport/stream.py) for any ASGI server: a stream's body through the ASGI
`send`, and its disconnect from `receive`.

`send` waits while the server's write buffer is full, and the stream's task must never wait
for a write it could queue, so chunks go to a queue that a sender task drains: everything
waiting at once, as one message. The queue's "high-water mark" is one write in flight: a chunk
written while the sender still has bytes waiting returns False unless forced (the stream then
bounds what waits by `buffer_bytes`), and so does a heartbeat — a client that reads nothing
gets no pile of them. A task waits in `receive` for `http.disconnect`. Both tasks end with the
stream (`end`); a write that fails (`OSError`: the client vanished) reports the client gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.types import Receive, Send

if TYPE_CHECKING:
    from sluicegate.transport.stream import Line


class AsgiSink:
    __slots__ = (
        "_closing",
        "_context",
        "_items",
        "_lost",
        "_receive",
        "_room",
        "_send",
        "_sender",
        "_size",
        "_waiter",
        "_watcher",
        "gone",
    )

    def __init__(self, send: Send, receive: Receive) -> None:
        self._send = send
        self._receive = receive
        self._items: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None  # the sender, waiting for items
        self._room: asyncio.Future[None] | None = None  # the stream, waiting for the sender to take them
        self._sender: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._lost: Callable[[], None] | None = None
        self._closing = False
        self.gone = False
        self._context = contextvars.copy_context()  # the request's (the sink is made in its task)

    def write(self, body: bytes, *, force: bool = False) -> bool:
        if self.gone or self._closing or (self._items and not force):
            return False
        if body:
            self._put(body)
        return True

    async def send(self, body: bytes) -> None:
        while self._items and not self.gone:
            self._room = asyncio.get_running_loop().create_future()
            try:
                await self._room
            finally:
                self._room = None
        if self.gone:
            raise OSError("the client is gone")
        self._put(body)

    def buffered(self) -> int:
        return self._size

    def line(self) -> Line | None:
        return None  # every chunk goes through the queue

    def watch(self, lost: Callable[[], None]) -> bool:
        if self.gone:
            return False
        self._lost = lost
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return True

    def unwatch(self) -> None:
        # The stream is ending (`end` follows, unless its task was cancelled from outside): no
        # more writes, and the sender stops after its write in flight, so neither task outlives
        # the stream on any path.
        self._lost = None
        self._closing = True
        self._wake()
        if self._watcher is not None:
            self._watcher.cancel()

    async def end(self, finished: bool) -> bool:
        self._closing = True
        sender = self._sender
        if sender is not None:
            if not finished:
                sender.cancel()
            self._wake()
            await asyncio.gather(sender, return_exceptions=True)  # its write in flight ends first
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if not finished or self.gone:
            return False
        # What the sender had not taken goes out with the end, in one message.
        last, self._items, self._size = b"".join(self._items), [], 0
        try:
            await self._send({"type": "http.response.body", "body": last, "more_body": False})
        except OSError:
            return False
        return True

    def _put(self, body: bytes) -> None:
        self._items.append(body)
        self._size += len(body)
        if self._sender is None:
            # In the request's context whoever writes first: the stream's task, a fast lane's
            # connection callback, or the heartbeat (core/alarms.py runs it in a context of its own).
            self._sender = asyncio.get_running_loop().create_task(self._drain(), context=self._context)
        else:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _drain(self) -> None:
        while True:
            if not self._items and not self._closing:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            if self._closing:
                return  # `end` sends what waits
            items, self._items, self._size = self._items, [], 0
            room = self._room
            if room is not None and not room.done():
                room.set_result(None)
            try:
                await self._send({"type": "http.response.body", "body": b"".join(items), "more_body": True})
            except OSError:  # the client vanished mid-write
                self._gone()
                return

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._gone()
                return

    def _gone(self) -> None:
        self.gone = True
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        lost, self._lost = self._lost, None
        if lost is not None:
            with contextlib.suppress(Exception):
                lost()
