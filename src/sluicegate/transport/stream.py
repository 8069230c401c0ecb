"""What every HTTP streaming transport shares: the bounded outbox, backpressure, heartbeats,
disconnect → cancel. A transport (`sse.py`, `ndjson.py`) brings only its framing — how a list
of frames becomes bytes — its content type and its heartbeat bytes.

Backpressure: frames wait in a per-stream outbox bounded in bytes (`buffer_bytes`). The sender
writes them as fast as the client reads — uvicorn's `send` waits while the socket's write
buffer is above its high-water mark — and the producer stops pulling from the pipeline while
the outbox is full, so a client that stops reading stops the engine (llama.cpp pauses between
tokens, an upstream connection stops being read and TCP flow control reaches it). Memory per
stream is the outbox bound plus the transport's write buffer, however long the answer.

The direct path: under our own server (`app/http_protocol.py`) the scope carries a
`BodyWriter` for the request, and the stream runs in the request's own task with no outbox,
no producer task and no disconnect-watcher task: each chunk is written to the socket in the
same step that made it. Past the socket's high-water mark chunks are still written
until `buffer_bytes` wait in its buffer (the outbox's bound); past that, a chunk goes through
the server's `send`, which waits for the drain, and the pipeline is not pulled meanwhile —
backpressure without a queue of our own. The server's `connection_lost` calls back
(`BodyWriter.watch`) to cancel the task's generator chain. A paced token costs one task
wake-up and one `transport.write`, where the outbox path takes a hop to a second task and an
ASGI `send`, and a stream holds two tasks fewer (bench/README.md, round eight). A server without
a writer (a plain ASGI call in a test) gets the outbox path.

When the client goes away the producer (and with it the whole generator chain down to the
engine) is cancelled at once. Deadlines are the pipeline's (`core/deadlines.py`): they end the
frames themselves, so every transport gets them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, cast

from starlette.types import Receive, Send

from sluicegate.core.frames import Frame

log = logging.getLogger(__name__)

DEFAULT_BUFFER_BYTES: Final = 256 * 1024
_END: Final = b"\x00end"  # producer finished (identity-compared, never sent)
_GONE: Final = b"\x00gone"  # client disconnected

# Scope key under which the app keeps the server's own `send`, from below every middleware.
# A stream's head goes through the middleware (they note its status); its body frames do not
# need them and skip their layers, one call each per frame.
SERVER_SEND: Final = "sluicegate.server_send"
# Scope key under which our HTTP protocol puts the request's `BodyWriter` (the direct path).
BODY_WRITER: Final = "sluicegate.body_writer"

# What a frame producer yields: frames to write, or bytes already framed (a stored replay).
Chunk = list[Frame] | bytes
RawHeaders = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Framing:
    """What makes a transport: how frames that are ready together become bytes, the fixed
    response headers (its content type), and what is sent while the stream is quiet (None:
    nothing)."""

    frames: Callable[[list[Frame]], bytes]
    headers: RawHeaders
    heartbeat: bytes | None = None


def server_send(scope: Mapping[str, object], send: Send) -> Send:
    """The send for a stream's body: the server's own, when the app put it in the scope."""
    raw = scope.get(SERVER_SEND)
    return raw if callable(raw) else send


class BodyWriter(Protocol):
    """The server's direct line to one request's client socket."""

    def write(self, body: bytes, *, force: bool = False) -> bool:
        """Write a body chunk now, framed as the server's `send` would frame it; False when it
        cannot (the head not sent yet or not chunked, the response complete, the client gone,
        the socket's buffer above its high-water mark unless `force`): then `send` it."""
        ...

    def watch(self, lost: Callable[[], None]) -> bool:
        """Call `lost` (once) when the client disconnects; False, without calling it, when it
        already has."""
        ...

    def unwatch(self) -> None:
        """No more `lost` calls."""
        ...

    def buffered(self) -> int:
        """Bytes written and not yet taken by the client's socket."""
        ...


def body_writer(scope: Mapping[str, object]) -> BodyWriter | None:
    """The request's direct body writer, when the server put one in the scope."""
    return cast("BodyWriter | None", scope.get(BODY_WRITER))


def raw_headers(base: Mapping[str, str]) -> RawHeaders:
    """A transport's fixed headers, encoded once (shared, not copied, by every stream)."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in base.items()]


def _head(base: RawHeaders, headers: Mapping[str, str] | None) -> RawHeaders:
    """The response head's headers as ASGI wants them: the fixed ones unless overridden."""
    if not headers:
        return list(base)
    fixed = {k.lower().encode("latin-1") for k in headers}
    raw = [pair for pair in base if pair[0] not in fixed]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    return raw


class _Outbox:
    """Frames waiting to be sent, for one consumer: a list, a byte count and two futures.

    `put` never waits (control items — heartbeats, the end, a disconnect — must always get
    through); the producer checks `full` and waits for `room` itself. The consumer takes
    everything waiting at once, which is how frames that are ready together go out in one write.
    """

    __slots__ = ("_items", "_room", "_size", "_waiter", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None  # the consumer, waiting for items
        self._room: asyncio.Future[None] | None = None  # the producer, waiting for space

    @property
    def full(self) -> bool:
        return self._size >= self.limit

    @property
    def empty(self) -> bool:
        return not self._items

    def put(self, item: bytes) -> None:
        self._items.append(item)
        self._size += len(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def room(self) -> None:
        """Wait until the consumer has taken what is waiting."""
        if self.full:
            self._room = asyncio.get_running_loop().create_future()
            try:
                await self._room
            finally:
                self._room = None

    async def take(self) -> list[bytes]:
        """Everything waiting, in order; waits for at least one item."""
        if not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self._items, self._size = self._items, [], 0
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return items


@dataclass(slots=True)
class StreamOutcome:
    finished: bool  # the producer ran to its end and everything was sent
    client_gone: bool  # the client disconnected (or vanished mid-write) first


class Emitter(Protocol):
    """How a stream's fast lane (engines/lane.py) hands frames to this transport without the
    task that streams it (`producer`), behind everything that task has sent."""

    @property
    def producer(self) -> asyncio.Task[object]:
        """The task whose frames these go between: the lane carries reads only while it waits."""
        ...

    @property
    def ready(self) -> bool:
        """Whether frames may be handed over now; else the producer's path must take them (it
        waits for the client)."""
        ...

    def emit(self, frames: list[Frame]) -> None: ...


class LaneBinding(Protocol):
    """The turn's side of a fast lane, given this stream's `Emitter` once the stream runs."""

    def bind(self, emitter: Emitter | None) -> None: ...


async def stream_chunks(
    chunks: AsyncIterator[Chunk],
    send: Send,
    receive: Receive,
    *,
    framing: Framing,
    heartbeat_seconds: float = 0.0,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    body_send: Send | None = None,  # for the body, once the head went through `send`
    writer: BodyWriter | None = None,  # the server's direct writer for the body (`body_writer`)
    lane: LaneBinding | None = None,  # a turn's fast lane (engines/lane.py): the direct path's
) -> StreamOutcome:
    """Send the response head, then every chunk framed, with heartbeats and backpressure.

    Returns once the stream ended or the client left; either way the producer has been run
    to completion or cancelled and awaited, so whatever it holds is released by then.
    """
    # (built in the call, not a local: this frame lives as long as the stream)
    await send({"type": "http.response.start", "status": status, "headers": _head(framing.headers, headers)})
    send = body_send or send
    interval = heartbeat_seconds if framing.heartbeat is not None else 0.0
    if writer is not None:
        task = asyncio.current_task()
        assert task is not None
        return await _Direct(task, interval, framing.heartbeat or b"", max(buffer_bytes, 1)).run(
            chunks, send, writer, framing.frames, lane
        )
    loop = asyncio.get_running_loop()
    outbox = _Outbox(max(buffer_bytes, 1))
    producer = loop.create_task(_produce(chunks, outbox, framing.frames))
    watcher = loop.create_task(_watch_disconnect(receive, outbox))
    beat_bytes = framing.heartbeat or b""
    last_sent = loop.time()
    timer: asyncio.TimerHandle | None = None

    def beat() -> None:
        nonlocal timer
        quiet = loop.time() - last_sent
        if quiet >= interval * 0.999:
            if outbox.empty:  # a client that reads nothing gets no pile of heartbeats either
                outbox.put(beat_bytes)
            timer = loop.call_later(interval, beat)
        else:
            timer = loop.call_later(interval - quiet, beat)

    if interval > 0:
        timer = loop.call_later(interval, beat)
    finished = False
    gone = False
    last = b""  # frames that came with the end: they go out with it, in one write
    try:
        while not (gone or finished):
            chunks_out: list[bytes] = []
            for item in await outbox.take():
                if item is _GONE:
                    gone = True
                    break
                if item is _END:
                    finished = True
                    break
                chunks_out.append(item)
            if finished:
                last = b"".join(chunks_out)
            elif chunks_out and not gone:
                await send({"type": "http.response.body", "body": b"".join(chunks_out), "more_body": True})
                last_sent = loop.time()
    except OSError:  # the client vanished mid-write
        gone = True
    finally:
        if timer is not None:
            timer.cancel()
        watcher.cancel()
        if not producer.done():
            gone = True
            producer.cancel()
        await asyncio.gather(producer, watcher, return_exceptions=True)
    if finished and not gone:
        try:
            await send({"type": "http.response.body", "body": last, "more_body": False})
        except OSError:
            return StreamOutcome(finished=False, client_gone=True)
    return StreamOutcome(finished=finished and not gone, client_gone=gone)


class _Direct:
    """One stream on the direct path (see the module's docstring): the request's own task runs
    it; what it shares with the heartbeat timer, the disconnect call and a fast lane lives here
    (a slotted object, not closures: a stream holds it for its whole life). It is the lane's
    `Emitter`."""

    __slots__ = (
        "beat_bytes",
        "cancelled",
        "frames",
        "gone",
        "held",
        "interval",
        "last_sent",
        "limit",
        "loop",
        "sending",
        "task",
        "timer",
        "writer",
    )

    def __init__(self, task: asyncio.Task[object], interval: float, beat_bytes: bytes, limit: int) -> None:
        self.task = task
        self.limit = limit  # `buffer_bytes`: what a slow client may leave waiting before the chain waits
        self.loop = task.get_loop()
        self.interval = interval
        self.beat_bytes = beat_bytes
        self.last_sent = self.loop.time()
        self.sending = False  # a chunk is in `send`, waiting for the drain: nothing may overtake it
        self.gone = False  # the client left
        self.cancelled = False  # ...and the task was cancelled for it (once)
        self.timer: asyncio.TimerHandle | None = None
        self.held = False  # a lane's write left `limit` waiting: the chain takes the next read
        self.writer: BodyWriter | None = None
        self.frames: Callable[[list[Frame]], bytes] | None = None

    @property
    def producer(self) -> asyncio.Task[object]:
        return self.task

    @property
    def ready(self) -> bool:
        # (Never while a chunk waits in `send`: the task is not waiting for a read then.)
        return not self.held

    def emit(self, frames: list[Frame]) -> None:
        """A lane's frames: written as the loop writes a chunk; once `limit` waits for the
        client, the lane stops until the loop has written again (the chain's `_send` waits for
        the drain): backpressure as on the loop's own path."""
        assert self.writer is not None and self.frames is not None
        writer, data = self.writer, self.frames(frames)
        if not writer.write(data):
            writer.write(data, force=True)
            if writer.buffered() >= self.limit:
                self.held = True
        self.last_sent = self.loop.time()

    def lost(self) -> None:
        """The server's call when the client disconnects."""
        self.gone = self.cancelled = True
        self.task.cancel()  # wherever the chain waits: the engine, the upstream, the drain

    def beat(self, write: Callable[[bytes], bool]) -> None:
        loop, interval = self.loop, self.interval
        quiet = loop.time() - self.last_sent
        if quiet >= interval * 0.999:
            # A client that reads nothing (the socket paused, a chunk waiting) gets no heartbeat.
            if not self.sending and write(self.beat_bytes):
                self.last_sent = loop.time()
            self.timer = loop.call_later(interval, self.beat, write)
        else:
            self.timer = loop.call_later(interval - quiet, self.beat, write)

    async def run(
        self,
        chunks: AsyncIterator[Chunk],
        send: Send,
        writer: BodyWriter,
        frames: Callable[[list[Frame]], bytes],
        lane: LaneBinding | None = None,
    ) -> StreamOutcome:
        if not writer.watch(self.lost):
            await _close(chunks)
            return StreamOutcome(finished=False, client_gone=True)
        loop, write = self.loop, writer.write
        if self.interval > 0:
            self.timer = loop.call_later(self.interval, self.beat, write)
        # A lane only where every chunk can go out this way (chunked, not a HEAD): its frames
        # are never sent the ASGI way.
        if lane is not None and writer.write(b"", force=True):
            self.writer, self.frames = writer, frames
            lane.bind(self)
        else:
            lane = None
        finished = False
        try:
            async for chunk in chunks:
                if isinstance(chunk, bytes):
                    if not chunk:
                        continue
                    data = chunk
                elif chunk:
                    data = frames(chunk)
                else:
                    continue
                if not write(data):
                    await self._send(send, writer, data)
                self.last_sent = loop.time()
                self.held = False  # written: a lane may write again
            finished = True
        except asyncio.CancelledError:
            if not self.cancelled or self.task.uncancel() > 0:  # not (only) ours: the server's
                raise
            self.cancelled = False
        except OSError:  # the client vanished mid-write
            self.gone = True
        except Exception:  # pipelines end streams themselves; this is a bug, not a client matter
            log.exception("stream producer failed")
            finished = True
        finally:
            if lane is not None:
                lane.bind(None)
            writer.unwatch()
            if self.timer is not None:
                self.timer.cancel()
        if self.cancelled:  # the chain caught the cancel `lost` sent and ended on its own
            self.task.uncancel()
        await _close(chunks)
        gone = self.gone
        if finished and not gone:
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                return StreamOutcome(finished=False, client_gone=True)
        return StreamOutcome(finished=finished and not gone, client_gone=gone)

    async def _send(self, send: Send, writer: BodyWriter, data: bytes) -> None:
        """A chunk the socket did not take at once (its buffer is above its high-water mark):
        still written while less than `limit` waits for the client — the outbox's bound, so
        `stream_buffer_bytes` means what it did — else the server's `send` waits for the drain."""
        if writer.buffered() < self.limit and writer.write(data, force=True):
            return
        self.sending = True
        try:
            await send({"type": "http.response.body", "body": data, "more_body": True})
        except asyncio.CancelledError:
            if self.gone:
                raise
            # Not the client leaving: a cancel meant for the chain, whose code waits for it at
            # an await of its own (a deadline's, the turn's, the server's shutdown). This chunk
            # goes out over the high-water mark (one chunk), then the cancel is sent again, to
            # land at the chain's next await.
            self.task.uncancel()
            writer.write(data, force=True)
            self.task.cancel()
        finally:
            self.sending = False


async def _close(chunks: AsyncIterator[Chunk]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:
            log.exception("closing a stream producer failed")


async def _produce(
    chunks: AsyncIterator[Chunk], outbox: _Outbox, framing: Callable[[list[Frame]], bytes]
) -> None:
    put = outbox.put
    try:
        async for chunk in chunks:
            if isinstance(chunk, bytes):
                if chunk:
                    put(chunk)
            elif chunk:
                put(framing(chunk))
            if outbox.full:
                await outbox.room()
    except Exception:  # pipelines end streams themselves; this is a bug, not a client matter
        log.exception("stream producer failed")
    finally:
        put(_END)
        await _close(chunks)


async def _watch_disconnect(receive: Receive, outbox: _Outbox) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            outbox.put(_GONE)
            return
