"""The one class that owns Server-Sent Events: framing, heartbeats and disconnects.

Everything else just yields encoded frames. Headers go out at once; from then on a
`: heartbeat` comment is sent whenever nothing else was sent for `heartbeat_seconds`, also
while the engine has produced nothing yet. When the client goes away, the frame producer (and
with it the whole generator chain down to the engine) is cancelled immediately.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

HEARTBEAT: Final = b": heartbeat\n\n"
_END: Final = b"\x00end"  # producer finished (identity-compared, never sent)
_GONE: Final = b"\x00gone"  # client disconnected


class _Outbox:
    """Frames waiting to be sent, for one consumer: a list and a future. Per frame it costs
    about half of what an `asyncio.Queue` hand-off does, and the consumer takes everything
    waiting at once, which is how frames that are ready together go out in one write."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: bytes) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> list[bytes]:
        """Everything waiting, in order; waits for at least one item."""
        if not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self._items = self._items, []
        return items


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE frame; `data` must be a single line (orjson output is)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class EventStreamResponse(StreamingResponse):
    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        heartbeat_seconds: float,
        headers: Mapping[str, str] | None = None,
        on_close: Callable[[], None] | None = None,
        heartbeat: bytes = HEARTBEAT,  # a dialect's own keep-alive frame (Anthropic's `ping`)
    ) -> None:
        base = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
        super().__init__(frames, media_type="text/event-stream", headers={**base, **(headers or {})})
        self.frames = frames
        self.heartbeat_seconds = heartbeat_seconds
        self.heartbeat = heartbeat
        self.client_disconnected = False
        self.on_close = on_close  # runs however the stream ends, even if it never started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        loop = asyncio.get_running_loop()
        outbox = _Outbox()
        producer = loop.create_task(self._produce(outbox))
        watcher = loop.create_task(_watch_disconnect(receive, outbox))
        interval = self.heartbeat_seconds
        last_sent = loop.time()
        timer: asyncio.TimerHandle | None = None

        def beat() -> None:
            nonlocal timer
            quiet = loop.time() - last_sent
            if quiet >= interval * 0.999:
                outbox.put(self.heartbeat)
                timer = loop.call_later(interval, beat)
            else:
                timer = loop.call_later(interval - quiet, beat)

        if interval > 0:
            timer = loop.call_later(interval, beat)
        finished = False
        last = b""  # frames that came with the end: they go out with it, in one write
        gone = False
        try:
            while not (gone or finished):
                # Whatever is waiting goes out in one write.
                chunks: list[bytes] = []
                for item in await outbox.take():
                    if item is _GONE:
                        gone = True
                        break
                    if item is _END:
                        finished = True
                        break
                    chunks.append(item)
                if finished:
                    last = b"".join(chunks)
                elif chunks:
                    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
                    last_sent = loop.time()
        except OSError:  # the client vanished mid-write
            pass
        finally:
            if timer is not None:
                timer.cancel()
            watcher.cancel()
            if not producer.done():
                self.client_disconnected = True
                producer.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            if self.on_close is not None:
                self.on_close()
        if finished:
            await send({"type": "http.response.body", "body": last, "more_body": False})

    async def _produce(self, outbox: _Outbox) -> None:
        put = outbox.put
        try:
            async for frame in self.frames:
                if frame:
                    put(frame)
        except Exception:  # encoders end streams themselves; this is a bug, not a client matter
            log.exception("stream producer failed")
        finally:
            put(_END)


async def _watch_disconnect(receive: Receive, outbox: _Outbox) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            outbox.put(_GONE)
            return
