"""What every HTTP streaming transport shares: one write path, backpressure, heartbeats,
disconnect → cancel. A transport (`sse.py`, `ndjson.py`) brings only its framing — how a list
of frames becomes bytes — its content type and its heartbeat bytes.

One write path, behind one seam: a stream's body goes to a `Sink`, the server's line to the
client. The stream runs in the request's own task: each chunk the producer makes is written to
the sink in the same step (`Sink.write`); a fast lane's frames (`Emitter.emit`, from the
upstream connection's callback) and the heartbeat go the same way. Two sinks exist:

- our uvicorn protocol's (`app/http_protocol.py` `CycleWriter`, in the scope under
  `BODY_WRITER`): the bytes go to the socket at once, framed as uvicorn frames them, with no
  ASGI message and no task hop per chunk, and the server's `connection_lost` reports a
  disconnect (`Sink.watch`) without a task waiting in `receive`;
- any other ASGI server's (`transport/asgi_sink.py` `AsgiSink`): a bounded queue a sender task
  drains with the ASGI `send`, and a task waiting in `receive` for the disconnect.

Backpressure: past the sink's high-water mark chunks are still written until `buffer_bytes`
wait in it (`Sink.buffered`); past that, the chunk goes through `Sink.send`, which waits for
the client, and the producer is not pulled meanwhile — so a client that stops reading stops the
engine (llama.cpp pauses between tokens, an upstream connection stops being read and TCP flow
control reaches it). Memory per stream is that bound plus the server's own buffer, however long
the answer.

When the client goes away the request's task (and with it the whole generator chain down to
the engine) is cancelled at once. Deadlines are the pipeline's (`core/deadlines.py`): they end
the frames themselves, so every transport gets them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, cast

from mypy_extensions import mypyc_attr
from starlette.types import Receive, Send

from sluicegate.core.alarms import Alarm, alarm_at
from sluicegate.core.frames import Frame
from sluicegate.core.tasks import task_of
from sluicegate.transport.asgi_sink import AsgiSink

log = logging.getLogger(__name__)

DEFAULT_BUFFER_BYTES: Final = 256 * 1024

# Scope key under which the app keeps the server's own `send`, from below every middleware.
# A stream's head goes through the middleware (they note its status); its body frames do not
# need them and skip their layers, one call each per frame.
SERVER_SEND: Final = "sluicegate.server_send"
# Scope key under which our HTTP protocol puts the request's `Sink` (app/http_protocol.py).
BODY_WRITER: Final = "sluicegate.body_writer"

# What a frame producer yields: frames to write, or bytes already framed (a stored replay).
Chunk = list[Frame] | bytes
RawHeaders = list[tuple[bytes, bytes]]
_SENT: Final[tuple[int, RawHeaders, None]] = (0, [], None)  # what `_Stream.run` keeps of its head once sent


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


class Line:
    """A chunked HTTP/1.1 body's way to the client's socket, for a fast lane's writes: a sink
    that writes chunks straight to a transport (our server's, `app/http_protocol.py`) hands one
    out (`Sink.line`) once the response streams, and keeps its two flags true to the connection
    — `open` (the response streams and is watched, the client is there) and `paused` (the
    transport above its high-water mark). A write is then framed and written in compiled code,
    not through the sink's interpreted `write` (~4 k instructions of a paced token's ~35 k:
    bench/README.md, gateway "Round fourteen"); when it cannot be (False), the sink's own
    `write` takes the chunk."""

    __slots__ = ("_transport", "open", "paused")

    def __init__(self, transport: asyncio.WriteTransport, paused: bool) -> None:
        self._transport = transport
        self.open = True
        self.paused = paused

    def write(self, body: bytes) -> bool:
        """`Sink.write(body)` (not forced), when the sink's flags and the transport allow it:
        the chunk as uvicorn's `send` frames it (size in hex, CRLF, the bytes, CRLF)."""
        if not self.open or self.paused:
            return False
        transport = self._transport
        if transport.is_closing():
            return False
        if body:
            transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True


class Sink(Protocol):
    """The server's line to one response's client, for its body (the head went out first)."""

    def write(self, body: bytes, *, force: bool = False) -> bool:
        """Write a body chunk now, without waiting; False when it cannot (the client gone, the
        response not a stream this sink can write, the sink above its high-water mark unless
        `force`): then `send` it."""
        ...

    async def send(self, body: bytes) -> None:
        """Write a body chunk once the client has taken what waits (raises `OSError` when the
        client vanished)."""
        ...

    async def end(self, finished: bool) -> bool:
        """The stream is over: when `finished`, the body's end goes out (False: the client
        vanished first); whatever the sink holds is released either way."""
        ...

    def watch(self, lost: Callable[[], None]) -> bool:
        """Call `lost` (once) when the client disconnects; False, without calling it, when it
        already has."""
        ...

    def unwatch(self) -> None:
        """No more `lost` calls, and no more writes: the stream is ending (`end` follows, unless
        the stream's task was cancelled from outside); nothing the sink runs may outlive it.
        The server's own sink (`body_writer`) may be watched again after it: the request's
        wait for an upstream's answer watches it before the stream does
        (`transport/answer_first.py`)."""
        ...

    def buffered(self) -> int:
        """Bytes written and not yet taken by the client."""
        ...

    def line(self) -> Line | None:
        """For a fast lane, once the head went out and while the stream is watched: a `Line`
        whose writes are this sink's `write` done natively (closed by `unwatch` and by the
        client leaving), or None (every chunk goes through `write`)."""
        ...


def body_writer(scope: Mapping[str, object]) -> Sink | None:
    """The server's own sink for the request, when the server put one in the scope."""
    return cast("Sink | None", scope.get(BODY_WRITER))


def raw_headers(base: Mapping[str, str]) -> RawHeaders:
    """A transport's fixed headers, encoded once (shared, not copied, by every stream)."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in base.items()]


# A response header's name → its ASGI form (lowercase latin-1), made once: a stream's own
# headers are a few names (the instance, the replica, the request id) with new values each time.
_names: dict[str, bytes] = {}
_MAX_NAMES: Final = 256


def _name(name: str) -> bytes:
    raw = _names.get(name)
    if raw is None:
        raw = name.lower().encode("latin-1")
        if len(_names) < _MAX_NAMES:
            _names[name] = raw
    return raw


def _head(base: RawHeaders, headers: Mapping[str, str] | None) -> RawHeaders:
    """The response head's headers as ASGI wants them: the fixed ones unless overridden."""
    if not headers:
        return list(base)
    own = [(_name(k), v.encode("latin-1")) for k, v in headers.items()]
    fixed = {name for name, _ in own}
    raw = [pair for pair in base if pair[0] not in fixed]
    raw += own
    return raw


@dataclass(slots=True)
class StreamOutcome:
    finished: bool  # the producer ran to its end and everything was sent
    client_gone: bool  # the client disconnected (or vanished mid-write) first

    def __init__(self, finished: bool, client_gone: bool) -> None:
        # Written out: compiled (core/events.py says why).
        self.finished = finished
        self.client_gone = client_gone


@mypyc_attr(allow_interpreted_subclasses=True)  # the tests' fakes derive from it too
class Emitter:
    """How a stream's fast lane (engines/lane.py) hands frames to this transport without the
    task that streams it (`producer`), behind everything that task has sent. A base class, not
    a protocol: compiled, the lane's reads of `producer` and `ready` and its `emit` per read are
    native, not generic (bench/README.md, gateway "Round sixteen", "the carry's calls")."""

    __slots__ = ("producer", "ready")

    # The task whose frames these go between: the lane carries reads only while it waits.
    producer: asyncio.Task[object]
    # Whether frames may be handed over now; else the producer's path must take them (it waits
    # for the client).
    ready: bool

    def emit(self, frames: list[Frame], now: float) -> None:
        """Write a lane's frames; `now`: the loop's time the read came in (`Carrier.carry`'s),
        the stream's last write for its heartbeat."""
        raise NotImplementedError


class LaneBinding(Protocol):
    """The turn's side of a fast lane, given this stream's `Emitter` once the stream runs."""

    def bind(self, emitter: Emitter | None) -> None: ...


def stream_chunks(
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
    writer: Sink | None = None,  # the server's own sink for the body (`body_writer`)
    lane: LaneBinding | None = None,  # a turn's fast lane (engines/lane.py)
) -> Coroutine[object, object, StreamOutcome]:
    """Send the response head, then every chunk framed, with heartbeats and backpressure.

    Returns once the stream ended or the client left; either way the producer has been run
    to completion or closed, so whatever it holds is released by then. (The stream's own
    coroutine, `_Stream.run`, not one of this function's around it: a frame less held for the
    stream's life.)
    """
    sink = writer if writer is not None else AsgiSink(body_send or send, receive)
    interval = heartbeat_seconds if framing.heartbeat is not None else 0.0
    stream = _Stream(sink, interval, framing.heartbeat or b"", max(buffer_bytes, 1))
    return stream.run(chunks, framing.frames, lane, send, (status, framing.headers, headers))


class _Stream(Emitter):
    """One stream (see the module's docstring): the request's own task runs it; what it shares
    with the heartbeat timer, the sink's disconnect call and a fast lane lives here (a slotted
    object, not closures: a stream holds it for its whole life). It is the lane's `Emitter`."""

    __slots__ = (
        "beat_bytes",
        "cancelled",
        "frames",
        "gone",
        "interval",
        "last_sent",
        "limit",
        "line",
        "loop",
        "sending",
        "sink",
        "task",
        "timer",
    )

    task: asyncio.Task[object]  # the request's: set when `run` starts in it
    loop: asyncio.AbstractEventLoop
    last_sent: float

    def __init__(self, sink: Sink, interval: float, beat_bytes: bytes, limit: int) -> None:
        self.sink = sink
        self.limit = limit  # `buffer_bytes`: what a slow client may leave waiting before the chain waits
        self.interval = interval
        self.beat_bytes = beat_bytes
        self.sending = False  # a chunk is in `send`, waiting for the client: nothing may overtake it
        self.gone = False  # the client left
        self.cancelled = False  # ...and the task was cancelled for it (once)
        self.timer: Alarm | None = None
        # False once a lane's write left `limit` waiting: the chain takes the next read. (Never
        # checked while a chunk waits in `send`: the task is not waiting for a read then.)
        self.ready = True
        self.frames: Callable[[list[Frame]], bytes] | None = None
        self.line: Line | None = None  # the sink's native write for the lane, if it has one

    def emit(self, frames: list[Frame], now: float) -> None:
        """A lane's frames: written as the loop writes a chunk; once `limit` waits for the
        client, the lane stops until the loop has written again (the chain's `_send` waits for
        the client): backpressure as on the loop's own path. `now`: the loop's time the read
        came in (read once for the read's clocks)."""
        assert self.frames is not None
        data = self.frames(frames)
        line = self.line
        if line is None or not line.write(data):
            sink = self.sink
            if not sink.write(data):
                sink.write(data, force=True)
                if sink.buffered() >= self.limit:
                    self.ready = False
        self.last_sent = now

    def lost(self) -> None:
        """The sink's call when the client disconnects."""
        self.gone = self.cancelled = True
        self.task.cancel()  # wherever the chain waits: the engine, the upstream, the client

    def beat(self) -> None:
        """The one heartbeat: after `interval` with nothing written, its bytes — unless the
        client reads nothing (the sink above its high-water mark, a chunk waiting)."""
        loop, interval = self.loop, self.interval
        quiet = loop.time() - self.last_sent
        if quiet >= interval * 0.999:
            if not self.sending and self.sink.write(self.beat_bytes):
                self.last_sent = loop.time()
            self.timer = alarm_at(loop, loop.time() + interval, self.beat)
        else:
            self.timer = alarm_at(loop, self.last_sent + interval, self.beat)

    async def run(
        self,
        chunks: AsyncIterator[Chunk],
        frames: Callable[[list[Frame]], bytes],
        lane: LaneBinding | None,
        send: Send,
        head: tuple[int, RawHeaders, Mapping[str, str] | None],
    ) -> StreamOutcome:
        # The head, built in the call (not a local: this frame lives as long as the stream).
        await send({"type": "http.response.start", "status": head[0], "headers": _head(head[1], head[2])})
        head = _SENT  # not held for the stream's life (mypyc compiles no `del` in a coroutine)
        task = task_of(asyncio.get_running_loop())
        assert task is not None
        self.task = self.producer = task
        self.loop = task.get_loop()
        self.last_sent = self.loop.time()
        sink = self.sink
        if not sink.watch(self.lost):
            await _close(chunks)
            await sink.end(False)
            return StreamOutcome(finished=False, client_gone=True)
        loop, write = self.loop, sink.write
        if self.interval > 0:
            self.timer = alarm_at(loop, self.last_sent + self.interval, self.beat)
        # A lane only where every chunk can be written this way (for our server's sink: chunked,
        # not a HEAD).
        if lane is not None and sink.write(b"", force=True):
            self.frames = frames
            self.line = sink.line()
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
                    await self._send(data)
                # Written: not held while the producer waits for the next (a stream waits long).
                data = chunk = b""
                self.last_sent = loop.time()
                self.ready = True  # written: a lane may write again
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
                self.line = None
            sink.unwatch()
            if self.timer is not None:
                self.timer.cancel()
        if self.cancelled:  # the chain caught the cancel `lost` sent and ended on its own
            self.task.uncancel()
        await _close(chunks)
        gone = self.gone
        if not await sink.end(finished and not gone) and finished and not gone:
            return StreamOutcome(finished=False, client_gone=True)
        return StreamOutcome(finished=finished and not gone, client_gone=gone)

    async def _send(self, data: bytes) -> None:
        """A chunk the sink did not take at once (it is above its high-water mark): still
        written while less than `limit` waits for the client — so `stream_buffer_bytes` bounds
        what a slow client holds — else `Sink.send` waits for the client."""
        sink = self.sink
        if sink.buffered() < self.limit and sink.write(data, force=True):
            return
        self.sending = True
        try:
            await sink.send(data)
        except asyncio.CancelledError:
            if self.gone:
                raise
            # Not the client leaving: a cancel meant for the chain, whose code waits for it at
            # an await of its own (a deadline's, the turn's, the server's shutdown). This chunk
            # goes out over the high-water mark (one chunk), then the cancel is sent again, to
            # land at the chain's next await.
            self.task.uncancel()
            sink.write(data, force=True)
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
