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

And it runs each request in a cycle of its own (`Cycle`, uvicorn's `RequestResponseCycle` with
our `send` and `receive`, and `run_asgi`'s ending as its task's done callback), whose response head is written with each header name in
canonical case (`Content-Type`, `Access-Control-Allow-Origin`), as llama-server, nginx and most
HTTP servers send them: uvicorn lowercases every name it writes, and clients that read headers
into a plain (case-sensitive) dict — llama.cpp's own test client does, `dict(response.headers)`
— missed them. Names are case-insensitive in HTTP, so nothing that read them before reads them
differently now. The head's lines are checked as uvicorn checks them, once per process
(app/response_head.py), not once per response.

What a connection holds while its response streams is kept small (bench/README.md, gateway
rounds twelve and thirteen): no request parser between requests, no uvloop timer for its
deadlines (an entry in core/alarms.py's heap), header names lowercased once per process, no
`run_asgi` coroutine around the app's.

This is the one module that knows uvicorn's internals (`HttpToolsProtocol`'s hooks, state and
helpers, `RequestResponseCycle`'s state, `flow` and `transport`); tests/unit/app/test_uvicorn_surface.py fails when a
uvicorn release changes what it relies on, and pyproject.toml pins the versions tested.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, Literal
from urllib.parse import unquote

import httptools
import orjson
from uvicorn._types import (
    ASGI3Application,
    ASGIReceiveEvent,
    ASGISendEvent,
    ASGIVersions,
    HTTPRequestEvent,
    HTTPResponseStartEvent,
)
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import FlowControl, service_unavailable
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import (
    get_client_addr,
    get_local_addr,
    get_path_with_query_string,
    get_remote_addr,
    is_ssl,
)

from sluicegate.app.auth import error_body
from sluicegate.app.response_head import head_block
from sluicegate.core.alarms import Alarm, alarm_at
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.engines.lane import Starts
from sluicegate.transport.stream import BODY_WRITER, Line

MESSAGE = "Invalid HTTP request received."
# How much of a refused read is looked in for the path: a request line, not a request body.
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


class Signal:
    """What uvicorn's cycle uses an `asyncio.Event` for (the body came, the response ended, the
    client left), with the Event's `set`, `clear`, `is_set` and `wait`, line for line, but made
    without a constructor: an Event per request was two interpreted calls (its `__init__` and
    its loop mixin's) and a deque, for a wait that rarely happens (the body is usually in the
    head's read). No `__init__`: the class's attributes are the defaults."""

    _value = False
    _waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if not self._value:
            self._value = True
            for waiter in self._waiters or ():
                if not waiter.done():
                    waiter.set_result(None)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if self._value:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            self._waiters.remove(waiter)


class Flow(FlowControl):
    """uvicorn's flow control, its writable event a `Signal` (set: writable), not an
    `asyncio.Event`: the Event and the deque it makes were ~0.9 KiB of every connection."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        writable = Signal()
        writable._value = True
        self._is_writable_event = writable  # type: ignore[assignment]  # its set, clear and wait


# A connection's pipeline until a request is pipelined on it (never appended to).
_NO_PIPELINE: deque[tuple[RequestResponseCycle, ASGI3Application]] = deque()


def _nothing() -> None:
    """A finished cycle's `on_response` (uvicorn sets a new lambda per request)."""


# uvicorn's `send_500_response`'s head.
_500_HEAD: HTTPResponseStartEvent = {
    "type": "http.response.start",
    "status": 500,
    "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"21"),
        (b"connection", b"close"),
    ],
}


async def _raised(exc: BaseException) -> None:
    """An app that raised when called, raising in its task as it did in `run_asgi`'s."""
    raise exc


_COROUTINES: set[type] = {CoroutineType}  # what a task runs as it is (`_start_asgi_task`)


async def _awaited(step: Awaitable[None]) -> None:
    """An app whose call gave an awaitable that is not a coroutine (a task needs one)."""
    return await step


class Cycle(RequestResponseCycle):
    """uvicorn's request cycle, with our own `send` and `receive` and its `run_asgi` as a done
    callback (`ended`): uvicorn's steps,
    minus what a request here never needs per call. The head's lines come from
    app/response_head.py, checked as uvicorn checks them and in canonical case, encoded once
    per process; `receive` waits only when the body has not come yet (a coroutine less per
    request). Everything else (flow control, 100 Continue, HEAD, keep-alive, the access log,
    the errors for a broken ASGI conversation) is uvicorn's, line for line."""

    tasks: set[asyncio.Task[None]]  # the server's (`_start_asgi_task`), for `ended`

    def ended(self, task: asyncio.Task[None]) -> None:
        """uvicorn's `run_asgi`, its steps after the app line for line, as the done callback of
        a task that runs the app's own coroutine (`JSONHttpToolsProtocol._start_asgi_task`),
        with uvicorn's own done callback, `tasks.discard`."""
        self.tasks.discard(task)
        try:
            result = task.result()
        except BaseException as exc:  # (a cancel too, as `run_asgi` caught it)
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                self._send_500()
            else:
                self.transport.close()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                self._send_500()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.transport.close()
        self.on_response = _nothing

    def _send_500(self) -> None:
        """uvicorn's `send_500_response` through our `send`, without a coroutine when `send`
        would not wait (it waits while the client's writes are paused: then a task does it)."""
        if self.flow.write_paused and not self.disconnected:
            asyncio.get_running_loop().create_task(self.send_500_response())
        elif not self.disconnected:
            self._send_head(_500_HEAD)
            self._send_body(b"Internal Server Error", False)

    async def send(self, message: ASGISendEvent) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self._send_head(message)
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )
            self._send_body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already completed."
            )

    def _send_head(self, message: HTTPResponseStartEvent) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status = message["status"]
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status,
            )
        lines, self.chunked_encoding, self.expected_content_length, close = head_block(
            self.default_headers,
            message.get("headers", ()),
            self.chunked_encoding,
            self.expected_content_length,
        )
        if close:
            self.keep_alive = False
        content = [STATUS_LINE[status], lines]
        if not self.keep_alive and not close:
            content.append(b"Connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked_encoding = True  # neither a length nor a transfer encoding given
            content.append(b"Transfer-Encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    def _send_body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            if body:
                self.transport.write(
                    b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
                    if not more_body
                    else b"%x\r\n%b\r\n" % (len(body), body)
                )
            elif not more_body:
                self.transport.write(b"0\r\n\r\n")
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    async def receive(self) -> ASGIReceiveEvent:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            flow = self.flow
            if flow.read_paused:
                flow.resume_reading()
            event: Signal = self.message_event  # type: ignore[assignment]  # ours (on_headers_complete)
            if not event._value:  # the body is usually here already: no wait's coroutine
                await event.wait()
            event._value = False
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message: HTTPRequestEvent = {
            "type": "http.request",
            "body": bytes(self.body),
            "more_body": self.more_body,
        }
        self.body = bytearray()
        return message


class CycleWriter:
    """Our server's `Sink` for one request: `write` does what uvicorn's
    `RequestResponseCycle.send` does with an `http.response.body` message that has more to
    come, for a chunked response, when it would not wait — or returns False, and `send` sends
    it the ASGI way (which waits for the drain)."""

    __slots__ = ("_cycle", "_flow", "_line", "_lost", "_protocol", "_transport")

    def __init__(self, protocol: JSONHttpToolsProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = protocol
        self._cycle = cycle
        self._flow = protocol.flow
        self._transport = protocol.transport
        self._lost: Callable[[], None] | None = None
        self._line: Line | None = None

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
        self._close_line()
        if self._protocol._watcher is self:
            self._protocol._watcher = None

    def buffered(self) -> int:
        return self._transport.get_write_buffer_size()

    def line(self) -> Line | None:
        """`write` done natively for a fast lane (transport/stream.py `Line`), while this
        writer is watched: of `write`'s checks, the ones that cannot change while the response
        streams are made here (a chunked body, not a HEAD, not complete), the client leaving
        and the flow pausing are told to the line (`connection_lost`, `flow_paused`), and it
        asks the transport whether it is closing."""
        if self._protocol._watcher is not self or not self.write(b"", force=True):
            return None
        self._close_line()
        line = self._line = Line(self._transport, self._flow.write_paused)
        return line

    def flow_paused(self, paused: bool) -> None:
        if self._line is not None:
            self._line.paused = paused

    def _close_line(self) -> None:
        line, self._line = self._line, None
        if line is not None:
            line.open = False

    def connection_lost(self) -> None:
        self._close_line()
        lost, self._lost = self._lost, None
        if lost is not None:
            lost()


# Header names as the client sent them -> lowercased, shared by every request that sends them:
# uvicorn makes a lowercased copy of each name per request (~40 B each, held in the scope for
# the stream's life; an SDK sends 10-20 headers). Bounded: names up to `_NAME_KEPT` bytes,
# `_NAMES_KEPT` of them, the first seen (a client's own names past that are lowercased as before).
_NAMES: dict[bytes, bytes] = {}
_NAMES_KEPT = 512
_NAME_KEPT = 64


def _lowered(name: bytes) -> bytes:
    """A name not in `_NAMES` yet: lowercased, and kept while the table has room."""
    lowered = name.lower()
    if len(_NAMES) < _NAMES_KEPT - 1 and len(name) <= _NAME_KEPT:
        lowered = _NAMES[name] = _NAMES.setdefault(lowered, lowered)  # one object for every casing
    return lowered


# The scope's "asgi" entry, one dict per ASGI version for every request (uvicorn makes one per
# request: ~0.2 KiB every stream held in its scope; nothing here or in Starlette writes to it).
_ASGI: dict[str, ASGIVersions] = {}


def _asgi(version: Literal["2.0", "3.0"]) -> ASGIVersions:
    found = _ASGI[version] = {"version": version, "spec_version": "2.3"}
    return found


def _started() -> None:
    """A request's first step has run (queued after it: `JSONHttpToolsProtocol`)."""
    Starts.waiting -= 1


# (uvicorn's: a response to the first request of a pipelined run after a close; httptools
# < 0.6.3 has no such setting) Asked once, not a `contextlib.suppress` (three Python calls) a request.
_LENIENT = hasattr(httptools.HttpRequestParser, "set_dangerous_leniencies")


def new_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A request parser as uvicorn's `HttpToolsProtocol.__init__` makes it."""
    parser = httptools.HttpRequestParser(protocol)
    if _LENIENT:
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


class JSONHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's default protocol (httptools, a dependency of ours), with a JSON 400, a deadline
    on request heads, our `Cycle` and `Sink`. The hooks a request passes through
    (`data_received`, `on_message_begin`, `on_headers_complete`) are uvicorn's and ours in one
    call each, not ours calling uvicorn's."""

    # Our state in slots, not in the instance's dict: uvicorn's own attributes are 27, and a dict
    # of more than 30 keys no longer shares its keys with the class's other instances (CPython's
    # limit), so each connection's became a table of its own, 1.6 KiB instead of ~0.3.
    __slots__ = (
        "_clock",
        "_clock_at",
        "_due",
        "_head",
        "_idle",
        "_in_head",
        "_watcher",
        "_whole",
        "header_timeout",
        "url",
    )

    def __init__(self, *args: Any, header_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout or None  # 0: no deadline
        self.url = b""
        # The read being parsed, for a request line the parser refuses (b"" between reads:
        # a held stream kept its request's bytes, head and body, for the connection's life).
        self._head = b""
        self._watcher: CycleWriter | None = None  # the streaming response's, told when the client leaves
        self._whole = False  # the parse's last event was a kept-alive request's end (`data_received`)
        # One clock per connection for both of its deadlines, the head's (`header_timeout`) and
        # the idle keep-alive's (uvicorn's `timeout_keep_alive`, which uvicorn keeps with a timer
        # per response): moving a deadline sets `_due` (0: nothing due), and the timer, when it
        # fires, closes the connection if what is due has passed, or waits again for it. Two
        # timers made and cancelled a request were ~5% of the protocol's instructions
        # (bench/request_cycle.py). The clock is an entry in the loop's one alarm heap
        # (core/alarms.py), not a uvloop timer: the head's deadline is armed for `header_timeout`
        # from the connection's start, so every stream younger than that held a timer (~0.5 KiB
        # with libuv's) for a deadline long met.
        self._clock: Alarm | None = None
        self._clock_at = 0.0  # when `_clock` fires
        self._due = 0.0
        self._in_head = False  # from a request's first byte (or the connection's start) to its headers' end
        self._idle = False  # after a response, until the next bytes: the keep-alive deadline is due
        # uvicorn's pipeline deque (760 B a connection) made when a request is pipelined
        self.pipeline = _NO_PIPELINE

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """uvicorn's, with a flow control whose writable signal is a `Signal` (an
        `asyncio.Event` and its deque were ~0.9 KiB a connection)."""
        self.connections.add(self)
        self.transport = transport
        self.flow = Flow(transport)
        self.server = get_local_addr(transport)
        self.client = get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", prefix)
        self._in_head = True  # a client that connects and sends nothing: the head's deadline
        if self.header_timeout is not None:
            self._due_in(self.header_timeout)

    def data_received(self, data: bytes) -> None:
        self._head = data  # for a request line the parser refuses (`send_400_response`)
        if self._idle:  # the keep-alive deadline ends with the next bytes
            self._idle = False
            self._due = 0.0
        parser = self.parser
        if parser is None:  # let go after the last request: the next one's bytes are here
            parser = self.parser = new_parser(self)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            self._whole = False
            self.logger.warning(MESSAGE)
            self.send_400_response(MESSAGE)
        except httptools.HttpParserUpgrade:
            self._whole = False  # the parser stays, paused at the upgrade, as uvicorn's does
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        else:
            if self._whole:
                # The read ended with a whole request and the connection kept alive: the
                # parser is where a new one starts, so none is held (912 B with its callbacks)
                # while the response streams; the next request's bytes make a new one.
                self._whole = False
                self.parser = None  # type: ignore[assignment]
        self._head = b""

    def on_message_begin(self) -> None:
        self._whole = False
        if not self._in_head:  # a kept-alive connection's next request begins
            self._in_head = True
            if self.header_timeout is not None:
                self._due_in(self.header_timeout)
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": _ASGI.get(self.asgi_version) or _asgi(self.asgi_version),
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }

    def on_header(self, name: bytes, value: bytes) -> None:
        """uvicorn's, line for line, the lowercased name shared (`_NAMES`)."""
        name = _NAMES.get(name) or _lowered(name)
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._due = 0.0
        parser, scope = self.parser, self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return  # a WebSocket: `data_received` hands the connection over
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        root = self.root_path
        scope["path"] = root + path
        scope["raw_path"] = root.encode("ascii") + raw_path if root else raw_path
        scope["query_string"] = url.query or b""
        app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        existing = self.cycle
        self.cycle = cycle = Cycle(
            scope=scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=Signal(),  # type: ignore[arg-type]
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(),
            on_response=self.on_response_complete,
        )
        scope[BODY_WRITER] = CycleWriter(self, cycle)  # type: ignore[typeddict-unknown-key]
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app)  # the request's task: its first step is queued
            # Until that step has run, the upstreams' fast lanes queue their reads behind it.
            if Starts.enabled:
                Starts.waiting += 1
                self.loop.call_soon(_started)
        else:  # pipelined: started when the one before it has completed
            self.flow.pause_reading()
            if self.pipeline is _NO_PIPELINE:
                self.pipeline = deque()
            self.pipeline.appendleft((cycle, app))

    def on_message_complete(self) -> None:
        """uvicorn's, line for line, and a note that the request is whole: `data_received` lets
        the parser go at the end of the read when nothing after it has begun."""
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.message_event.set()
        # A connection not kept alive keeps its parser: llhttp reads what follows such a
        # message as data after a close (uvicorn makes it lenient about it), where a new parser
        # would read a request.
        self._whole = cycle.keep_alive

    def _start_asgi_task(self, cycle: Cycle, app: ASGI3Application) -> None:  # type: ignore[override]
        """uvicorn's, its task running the app's own coroutine rather than `run_asgi`'s around
        it: a coroutine (~0.25 KiB) that every stream held, and a frame each of its task's
        steps passed through. What `run_asgi` did after the app is the task's done callback
        (`Cycle.ended`, with uvicorn's `tasks.discard`). The app is called here, not in the
        task: ours is a plain call that hands on its middleware's coroutine (app/factory.py)."""
        try:
            step: Any = app(cycle.scope, cycle.receive, cycle.send)
        except BaseException as exc:  # raised in the task, as `run_asgi`'s call did
            step = _raised(exc)
        kind = type(step)
        if kind not in _COROUTINES:
            # A compiled app's coroutine is a Coroutine, not a CoroutineType: it runs as the
            # task's own too, not in a frame of `_awaited` that every step passes through and
            # every stream holds (~0.2 KiB). Its type is remembered: the ABC's check is a call.
            if isinstance(step, Coroutine):
                if len(_COROUTINES) < 16:
                    _COROUTINES.add(kind)
            else:
                step = _awaited(step)
        cycle.tasks = self.tasks
        if self.config.reset_contextvars:  # (uvicorn's opt-in; Python 3.11+)
            task = self.loop.create_task(step, context=contextvars.Context())
        else:
            task = self.loop.create_task(step)
        task.add_done_callback(cycle.ended)
        self.tasks.add(task)

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive deadline on the connection's clock: start the next
        pipelined request, else wait for one as long as `timeout_keep_alive`."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)  # type: ignore[arg-type]  # ours (on_headers_complete)
        elif not (self._in_head and self.header_timeout is not None):  # (a head under way has its own)
            self._idle = True
            self._due_in(self.timeout_keep_alive)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._watcher is not None:  # a streaming response's fast lane writes natively
            self._watcher.flow_paused(True)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._watcher is not None:
            self._watcher.flow_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._due = 0.0
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None
        super().connection_lost(exc)
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.connection_lost()

    def _due_in(self, seconds: float) -> None:
        due = self._due = self.loop.time() + seconds
        clock = self._clock
        if clock is None or self._clock_at > due:  # else the clock waits again when it fires
            if clock is not None:
                clock.cancel()
            self._clock = alarm_at(self.loop, due, self._tick)
            self._clock_at = due

    def _tick(self) -> None:
        self._clock = None
        due = self._due
        if not due:
            return
        if due > self.loop.time():
            self._clock = alarm_at(self.loop, due, self._tick)
            self._clock_at = due
            return
        self._due = 0.0  # a head too slow, or a kept-alive connection idle too long
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.transport.write(bad_request(path_of(bytes(self.url), self._head[:HEAD_KEPT])))
        self.transport.close()
