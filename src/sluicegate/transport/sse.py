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
    ) -> None:
        base = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
        super().__init__(frames, media_type="text/event-stream", headers={**base, **(headers or {})})
        self.frames = frames
        self.heartbeat_seconds = heartbeat_seconds
        self.client_disconnected = False
        self.on_close = on_close  # runs however the stream ends, even if it never started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        producer = loop.create_task(self._produce(queue))
        watcher = loop.create_task(_watch_disconnect(receive, queue))
        interval = self.heartbeat_seconds
        last_sent = loop.time()
        timer: asyncio.TimerHandle | None = None

        def beat() -> None:
            nonlocal timer
            quiet = loop.time() - last_sent
            if quiet >= interval * 0.999:
                queue.put_nowait(HEARTBEAT)
                timer = loop.call_later(interval, beat)
            else:
                timer = loop.call_later(interval - quiet, beat)

        if interval > 0:
            timer = loop.call_later(interval, beat)
        finished = False
        last = b""  # frames that came with the end: they go out with it, in one write
        try:
            while True:
                frame = await queue.get()
                if frame is _GONE:
                    break
                if frame is _END:
                    finished = True
                    break
                # Coalesce whatever else is already waiting into one write.
                chunks = [frame]
                while not queue.empty():
                    more = queue.get_nowait()
                    if more is _END:
                        finished = True
                        break
                    if more is _GONE:
                        queue.put_nowait(more)
                        break
                    chunks.append(more)
                if finished:
                    last = b"".join(chunks)
                    break
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

    async def _produce(self, queue: asyncio.Queue[bytes]) -> None:
        try:
            async for frame in self.frames:
                if frame:
                    queue.put_nowait(frame)
        except Exception:  # encoders end streams themselves; this is a bug, not a client matter
            log.exception("stream producer failed")
        finally:
            queue.put_nowait(_END)


async def _watch_disconnect(receive: Receive, queue: asyncio.Queue[bytes]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            queue.put_nowait(_GONE)
            return
