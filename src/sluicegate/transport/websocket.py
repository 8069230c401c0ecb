"""Frames over a WebSocket: each frame's `data` is one text message.

The WebSocket counterpart of `transport/sse.py`: an encoder's frames go out as they are, one
JSON event per text message, in order. There is no SSE framing (`event:` names are the events'
own `type`), no `[DONE]` (a turn ends with its terminal event) and no heartbeat comments (the
server's WebSocket pings keep the connection alive).

Backpressure: each message is sent before the next frame is pulled, and the ASGI server's
`send` waits while the socket's write buffer is above its high-water mark, so a client that
stops reading stops the engine. When the client goes away (`gone` is set by whoever reads the
socket, or a send fails) the producer — the whole generator chain down to the engine — is
cancelled and awaited before this returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.websockets import WebSocketDisconnect

from sluicegate.core.frames import DONE, Frame
from sluicegate.transport.stream import StreamOutcome

log = logging.getLogger(__name__)

SendText = Callable[[str], Awaitable[None]]


async def stream_websocket(
    chunks: AsyncIterator[list[Frame]], send_text: SendText, gone: asyncio.Event
) -> StreamOutcome:
    """Send every frame of `chunks` as a text message until they end or the client goes."""
    loop = asyncio.get_running_loop()
    producer = loop.create_task(_produce(chunks, send_text))
    watcher = loop.create_task(gone.wait())
    try:
        await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not producer.done():
            producer.cancel()
        await asyncio.gather(producer, watcher, return_exceptions=True)
    finished = producer.done() and not producer.cancelled() and producer.result()
    return StreamOutcome(finished=bool(finished) and not gone.is_set(), client_gone=not finished)


async def _produce(chunks: AsyncIterator[list[Frame]], send_text: SendText) -> bool:
    """True when every frame was sent; False when the client vanished mid-send."""
    try:
        async for frames in chunks:
            for frame in frames:
                if frame is not DONE:
                    await send_text(frame.data.decode())
        return True
    except (OSError, WebSocketDisconnect):  # the client vanished mid-write
        return False
    except Exception:  # pipelines end their streams themselves; this is a bug
        log.exception("websocket stream producer failed")
        return False
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
