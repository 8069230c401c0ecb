"""uvicorn's HTTP protocol, answering a request it cannot parse with a JSON error.

A request line or header the parser rejects (an unknown method llhttp does not know, raw
spaces or non-ASCII bytes in the path, a broken header) never reaches the app: uvicorn answers
it itself, with a plain-text "Invalid HTTP request received.". Clients of this server expect
a JSON error body everywhere, so the protocol classes are subclassed to send the same 400 in
the error shape of the API the path names (when the path got that far), OpenAI's otherwise.

It also bounds how long a request head may take: from the connection's start (a client that
connects and sends nothing) or a request's first byte (on a kept-alive connection) to the end
of its headers, at most `header_timeout` seconds, or the connection is closed. uvicorn bounds
only the idle time between requests (`timeout_keep_alive`); a client dribbling its headers a
byte at a time, or sending none, held a connection for as long as it liked.

And it gives each request our server's `Sink` (transport/stream.py; in the scope under
`transport.stream.BODY_WRITER`): a streamed body's chunks written to the socket by the task
that made them, framed as uvicorn's `send` frames them, without an ASGI message and a hop to a
sender task per chunk; and a disconnect reported by a call from `connection_lost`, without a
task per stream waiting in `receive` for it.

And it writes response header names in their canonical case (`Content-Type`,
`Access-Control-Allow-Origin`), as llama-server, nginx and most HTTP servers send them: uvicorn
lowercases every name it writes, and clients that read headers into a plain (case-sensitive)
dict — llama.cpp's own test client does, `dict(response.headers)` — missed them. Names are
case-insensitive in HTTP, so nothing that read them before reads them differently now.

This is the one module that knows uvicorn's internals (`HttpToolsProtocol`'s hooks and
`flow`, `RequestResponseCycle`'s state and `transport`); tests/unit/app/test_uvicorn_surface.py fails when a
uvicorn release changes what it relies on, and pyproject.toml pins the versions tested.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from sluicegate.app.auth import error_body
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.engines.lane import Starts
from sluicegate.transport.stream import BODY_WRITER

MESSAGE = "Invalid HTTP request received."
# How much of the latest read is kept to find the path in: a request line, not a request body
# (the whole read stayed referenced for the connection's life, ~its body size per stream).
HEAD_KEPT = 2048


def bad_request(path: str) -> bytes:
    """The whole 400 response, bytes on the wire (the connection is closed after it)."""
    info = ErrorInfo(ErrorKind.INVALID_REQUEST, MESSAGE, code="invalid_http_request")
    body = orjson.dumps(error_body(path, info))
    head = (
        b"HTTP/1.1 400 Bad Request\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n"
    )
    return head + body


def path_of(url: bytes, head: bytes) -> str:
    """The request's path as far as it can be told: the URL the parser saw, else the second
    word of the request line (a method the parser refused comes before the URL)."""
    if not url:
        words = head.split(b"\r\n", 1)[0].split(b" ")
        url = words[1] if len(words) > 2 else b""
    return url.split(b"?", 1)[0].decode("latin-1")


def canonical_head(head: bytes) -> bytes:
    """A response head with each header name in canonical case (`access-control-allow-origin`
    -> `Access-Control-Allow-Origin`); the status line and the values as they were."""
    status, _, rest = head.partition(b"\r\n")
    lines = [status]
    for line in rest.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        lines.append(name.title() + colon + value if colon else line)
    return b"\r\n".join(lines)


class HeadCasing:
    """Stands in for the connection's transport in one `RequestResponseCycle` until the
    response head has gone through it: the head is written with canonical names, and the
    cycle gets the real transport back, so no body write passes through here."""

    __slots__ = ("_cycle", "_transport")

    def __init__(self, cycle: RequestResponseCycle, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._transport = transport

    def write(self, data: bytes) -> None:
        if data.startswith(b"HTTP/1.1 1"):  # `100 Continue`, before the head: no names in it
            self._transport.write(data)
            return
        self._cycle.transport = self._transport
        self._transport.write(canonical_head(data))

    def __getattr__(self, name: str) -> Any:  # is_closing, close, get_extra_info ...
        return getattr(self._transport, name)


class CycleWriter:
    """Our server's `Sink` for one request: `write` does what uvicorn's
    `RequestResponseCycle.send` does with an `http.response.body` message that has more to
    come, for a chunked response, when it would not wait — or returns False, and `send` sends
    it the ASGI way (which waits for the drain)."""

    __slots__ = ("_cycle", "_flow", "_lost", "_protocol", "_transport")

    def __init__(self, protocol: JSONHttpToolsProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = protocol
        self._cycle = cycle
        self._flow = protocol.flow
        self._transport = protocol.transport
        self._lost: Callable[[], None] | None = None

    def write(self, body: bytes, *, force: bool = False) -> bool:
        cycle = self._cycle
        if (
            cycle.chunked_encoding is not True  # the head not sent yet, or a length-framed body
            or cycle.response_complete
            or cycle.disconnected
            or (self._flow.write_paused and not force)  # `send` would wait for the drain first
            or self._transport.is_closing()
            or cycle.scope["method"] == "HEAD"  # `send` writes no body for HEAD
        ):
            return False
        if body:  # the chunk as `send` frames it: size in hex, CRLF, the bytes, CRLF
            self._transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    async def send(self, body: bytes) -> None:
        await self._cycle.send({"type": "http.response.body", "body": body, "more_body": True})

    async def end(self, finished: bool) -> bool:
        if not finished:
            return False
        try:
            await self._cycle.send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return False
        return True

    def watch(self, lost: Callable[[], None]) -> bool:
        if self._cycle.disconnected or self._transport.is_closing():
            return False
        # One response streams at a time on a connection (uvicorn starts a pipelined request's
        # app when the one before it has completed), so the protocol keeps one watcher.
        self._lost = lost
        self._protocol._watcher = self
        return True

    def unwatch(self) -> None:
        self._lost = None
        if self._protocol._watcher is self:
            self._protocol._watcher = None

    def buffered(self) -> int:
        return self._transport.get_write_buffer_size()

    def connection_lost(self) -> None:
        lost, self._lost = self._lost, None
        if lost is not None:
            lost()


def _started() -> None:
    """A request's first step has run (queued after it: `JSONHttpToolsProtocol`)."""
    Starts.waiting -= 1


class JSONHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's default protocol (httptools, a dependency of ours), with a JSON 400 and a
    deadline on request heads."""

    _head = b""
    _head_deadline: asyncio.TimerHandle | None = None
    _watcher: CycleWriter | None = None  # the streaming response's, told when the client leaves

    def __init__(self, *args: Any, header_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout or None  # 0: no deadline

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_deadline is None:  # a kept-alive connection's next request begins
            self._arm_head_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_head_deadline()
        super().on_headers_complete()  # the request's task: its first step is queued
        # Until that step has run, the upstreams' fast lanes queue their reads behind it.
        if Starts.enabled:
            Starts.waiting += 1
            self.loop.call_soon(_started)
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # not a websocket upgrade
            self.scope[BODY_WRITER] = CycleWriter(self, cycle)  # type: ignore[typeddict-unknown-key]
            cycle.transport = HeadCasing(cycle, self.transport)  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.connection_lost()

    def _arm_head_deadline(self) -> None:
        if self.header_timeout is not None:
            self._head_deadline = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._head = data[:HEAD_KEPT]  # the latest bytes: for a request line the parser refuses
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        self.transport.write(bad_request(path_of(bytes(getattr(self, "url", b"")), self._head)))
        self.transport.close()
