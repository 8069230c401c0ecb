"""The one place the HTTP client lives, so a faster one can replace it here alone.

A small HTTP/1.1 client on an asyncio protocol, with httptools (C, already installed with
uvicorn[standard]) parsing the answers. It is what the relay needs and no more: profiling the
gateway under load showed httpx (httpcore + h11, pure Python) parsing chunked bodies as the
largest cost per token. Here a read from the socket is decoded in C and handed to the engine as
one piece, however many chunks it held, so a token costs no Python per HTTP chunk.

One `HttpPool` per replica: keep-alive connections kept warm between requests (no bound on how
many are open; up to `MAX_IDLE` wait idle). The engine needs three things from it: send a
streaming POST and get the status once the upstream answers, iterate the body's bytes as they
arrive, and close at once (which closes the connection when the body was not read to its end,
so a cancelled request stops the upstream's generation). Proxies from the environment are not
used: upstreams are addressed directly. Bodies are asked for uncompressed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final
from urllib.parse import urlsplit

import httptools

from sluicegate import __version__
from sluicegate.engines.lane import Starts
from sluicegate.engines.upstream.errors import MAX_ERROR_BODY

# The class whose counter every read checks, in a `Final`: compiled, a C static, where the
# imported name is a module dict lookup per read.
_STARTS: Final = Starts

MAX_IDLE = 256  # idle keep-alive connections kept per replica
HIGH_WATER = 256 * 1024  # body bytes buffered unread before the socket stops being read


class ConnectFailed(Exception):
    """The upstream could not be reached or dropped the connection before answering: nothing
    was generated, so another replica may be tried."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BodyBroken(Exception):
    """The connection ended in the middle of a response body."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; one exchange at a time."""

    # A connection lives as long as its stream and one is pooled per idle keep-alive: fields,
    # not an instance dict (bench/README.md, gateway "Round fifteen").
    __slots__ = (
        "_body",
        "_buffered",
        "_chunked",
        "_error",
        "_head",
        "_held",
        "_length",
        "_loop",
        "_parser",
        "_reading",
        "_rousing",
        "_until_eof",
        "_wake",
        "complete",
        "lost",
        "read_through",
        "reusable",
        "transport",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        # The loop, once: `asyncio.get_running_loop()` checks the pid, a getpid syscall per
        # call, and a stream's task would make one per read it waits for.
        self._loop = asyncio.get_running_loop()
        self.lost = False
        self._parser: httptools.HttpResponseParser | None = None
        self._head: asyncio.Future[int] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._body: list[bytes] = []
        self._buffered = 0
        self._reading = True
        self.complete = False
        self.reusable = False
        self._chunked = False
        self._length: bytes | None = None
        self._until_eof = False  # neither a length nor chunked: the body ends with the connection
        self._error: Exception | None = None
        # While the engine waits for a read, a read may be handed here instead (engines/lane.py):
        # True, it was carried on and the wait goes on; False, the engine must look (it is woken).
        self.read_through: Callable[[bytes], bool] | None = None
        # A request's start step this connection woke (its answer, a read before its lane is
        # open), counted in `Starts` until the woken task resumes.
        self._rousing = False
        self._held = 0  # reads held back behind a start, to be carried in order (`_carry`)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # nothing asked: an idle connection does not talk
            self.close()
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BodyBroken("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(BodyBroken(f"the upstream sent malformed HTTP ({exc})"))
        body = self._body
        wake = self._wake  # pending: the engine waits, and everything before this read is taken
        if (
            body
            and self.read_through is not None
            and wake is not None
            and not wake.done()
            and not self.complete
        ):
            data = body[0] if len(body) == 1 else b"".join(body)
            body.clear()
            if _STARTS.waiting or self._held:
                # A start is ready to run: this read is carried after it (behind any read held
                # before it), in a callback queued behind that start's step — not by waking
                # the stream's task, whose steps through the coroutine chain cost several times
                # the lane's (bench/README.md, gateway "Round twelve").
                self._held += 1
                self._loop.call_soon(self._carry, data)
            elif not self.read_through(data):
                self._wakeup()
            return
        if body or self.complete:
            self._buffered += len(data)  # (an upper bound of the body bytes this read added)
            self._wakeup()
            if self._reading and self._buffered > HIGH_WATER and self.transport is not None:
                self._reading = False
                self.transport.pause_reading()

    def _carry(self, data: bytes) -> None:
        """A read held back behind a start (`data_received`): carried now if the engine still
        waits for it, else put back first in line, for the engine's next read."""
        self._held -= 1
        wake = self._wake
        if (
            self.read_through is not None
            and wake is not None
            and not wake.done()
            and not self._body
            and not self.complete
        ):
            if not self.read_through(data):
                self._wakeup()
            return
        self._body.insert(0, data)
        self._buffered += len(data)
        self._wakeup()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.reusable = False
        if self._head is not None and not self._head.done():
            self._head.set_exception(ConnectFailed(f"the upstream closed the connection ({exc or 'EOF'})"))
        elif self._parser is not None and not self.complete:
            if self._until_eof and exc is None:
                self.complete = True
            else:
                self._error = BodyBroken(f"the upstream closed the connection mid-body ({exc or 'EOF'})")
        self._wakeup()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        self._until_eof = self._chunked is False and self._length is None
        head = self._head
        if head is not None and not head.done():
            head.set_result(status)
            self._head = None  # answered: the exchange holds it, not the connection the body's life
            self._rouse()

    def on_header(self, name: bytes, value: bytes) -> None:
        # The name's length first: compiled, `lower()` is a generic method call (~400
        # instructions), and most of an answer's headers are neither of these two.
        size = len(name)
        if size == 17 and name.lower() == b"transfer-encoding":
            if value.lower().find(b"chunked") >= 0:
                self._chunked = True
        elif size == 14 and name.lower() == b"content-length":
            self._length = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        assert self._parser is not None
        self.complete = True
        self.reusable = self._parser.should_keep_alive()

    # the client side
    def start(self, request: bytes) -> asyncio.Future[int]:
        """Write a request; the future gets the status when the headers are in."""
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self._head = self._loop.create_future()
        self._body, self._buffered, self.complete, self.reusable = [], 0, False, False
        self._chunked, self._length = False, None
        self._until_eof, self._error = False, None
        self.transport.write(request)
        return self._head

    async def read(self) -> bytes | None:
        """All the body that arrived since the last read; None at its end. Empty only when a
        `read_through` handler took the read and woke the engine to look for itself."""
        if not self._body:
            if self._over():
                return None
            self._wake = self._loop.create_future()
            try:
                await self._wake
            finally:
                self._wake = None
                if self._rousing:
                    self._settle()
            # (what did arrive goes first; an error or the end after it)
            if not self._body and self._over():
                return None
        data = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if not self._reading and self.transport is not None and not self.lost:
            self._reading = True
            self.transport.resume_reading()
        return data

    def _over(self) -> bool:
        """With nothing left to read: the body's end (True), or its error raised. A method, not
        the checks inline, so that a check before the wait does not narrow `_error` to None
        after it (mypyc compiles the narrowed type: reading the error then raised TypeError)."""
        if self._error is not None:
            raise self._error
        return self.complete

    def done(self) -> None:
        """The exchange is over: the next request may use this connection if it is reusable."""
        self._parser = None
        self._head = None
        self.read_through = None
        if self._rousing:
            self._settle()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        self._error = error
        self.close()

    def _wakeup(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
            if self.read_through is None:  # no lane open yet: a start's read (or no lane at all)
                self._rouse()

    def _rouse(self) -> None:
        if not self._rousing and _STARTS.enabled:
            self._rousing = True
            _STARTS.waiting += 1

    def _settle(self) -> None:
        """The task this connection woke has resumed (or the exchange is over)."""
        self._rousing = False
        _STARTS.waiting -= 1


class StreamingResponse:
    __slots__ = ("_conn", "_pool", "read", "status")

    def __init__(self, pool: HttpPool, conn: _Connection, status: int) -> None:
        self._pool = pool
        self._conn = conn
        self.status = status
        # The body's next piece, None at its end: the connection's own read, one frame per
        # read (`chunks()` is the same as an async iterator, a frame more).
        self.read = conn.read

    def chunks(self) -> AsyncIterator[bytes]:
        return _Chunks(self._conn)

    def read_through(self, handler: Callable[[bytes], bool] | None) -> None:
        """Hand reads that arrive while `chunks()` is awaited to `handler` (see `_Connection`)."""
        self._conn.read_through = handler

    @property
    def received(self) -> bool:
        """The whole body has arrived: the connection can go back to the pool as it is."""
        return self._conn.complete

    async def error_body(self) -> bytes:
        """The start of a non-2xx body; the rest is not waited for."""
        body = b""
        while len(body) < 4 * MAX_ERROR_BODY and (data := await self._conn.read()) is not None:
            body += data
        return body

    def release(self) -> None:
        """The exchange is over: the connection back to the pool, or closed (`aclose` without
        a coroutine, for a compiled caller: a coroutine awaited there costs a StopIteration)."""
        self._pool._release(self._conn)

    async def aclose(self) -> None:
        self._pool._release(self._conn)


class _Chunks:
    """The body's bytes as they arrive: one piece per read from the socket."""

    __slots__ = ("_conn",)

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        data = await self._conn.read()
        if data is None:
            raise StopAsyncIteration
        return data


def tls_context() -> ssl.SSLContext:
    """Verify upstreams against certifi's CA bundle when it is installed (as httpx did, so an
    https upstream that worked before still does), else against the system's."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class HttpPool:
    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        *,
        connect_timeout: float | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the context an https upstream is verified with (default `tls_context()`)."""
        self.base_url = base_url.rstrip("/")
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = (tls or tls_context()) if url.scheme == "https" else None
        self._prefix = url.path
        host = url.netloc.rsplit("@", 1)[-1]
        fixed = {"Host": host, "User-Agent": f"sluicegate/{__version__}", **headers}
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []  # in-flight ones are closed by their response

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        extra_headers: bytes = b"",
        content_type: bytes = b"application/json",
    ) -> bytes:
        target = (self._prefix + "/" + path.lstrip("/")).encode()
        head = method.encode() + b" " + target + b" HTTP/1.1\r\n" + self._headers + extra_headers
        if body is None:
            return head + b"\r\n"
        return head + b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n" % (content_type, len(body)) + body

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                )
        except TimeoutError as exc:
            raise ConnectFailed(
                f"connecting timed out after {self._connect_timeout:g}s", timed_out=True
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(_describe(exc)) from exc
        return conn

    async def _exchange(self, request: bytes) -> StreamingResponse:
        """Send on a kept-alive connection, or a new one; a kept-alive connection the upstream
        closed meanwhile (nothing was answered) is retried once on a new connection. One
        coroutine: a request's wait for its answer is one frame here."""
        idle = self._idle
        while True:
            kept = bool(idle)
            if kept:
                conn = idle.pop()
                if conn.lost:
                    continue
            else:
                conn = await self._connect()
            try:
                status = await conn.start(request)
            except ConnectFailed:
                self._discard(conn)
                if kept:
                    continue
                raise
            except BaseException:
                self._discard(conn)
                raise
            if conn._rousing:  # resumed: the start step its answer woke runs now
                conn._settle()
            return StreamingResponse(self, conn, status)

    def post_stream(
        self, path: str, body: bytes, extra_headers: bytes = b"", content_type: bytes = b"application/json"
    ) -> Coroutine[Any, Any, StreamingResponse]:
        """POST `body` (JSON unless `content_type` says: an audio upload's multipart form);
        the coroutine returns when the status line and headers arrived. `extra_headers`: header
        lines of this request only (`name: value\\r\\n` each; the trace context)."""
        return self._exchange(self._request("POST", path, body, extra_headers, content_type))

    async def get(self, path: str, *, timeout: float, max_bytes: int | None = None) -> tuple[int, bytes]:
        """A small GET (health checks, model lists, load reports); transport failures, and an
        answer past `max_bytes`, raise `ConnectFailed`."""
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                response = await self._exchange(self._request("GET", path, None))
                conn, status = response._conn, response.status
                body = b""
                while (data := await conn.read()) is not None:
                    body += data
                    if max_bytes is not None and len(body) > max_bytes:
                        self._discard(conn)
                        raise ConnectFailed(f"the answer is larger than {max_bytes} bytes")
        except TimeoutError as exc:
            if conn is not None:
                self._discard(conn)
            raise ConnectFailed(f"timed out after {timeout:g}s", timed_out=True) from exc
        except BodyBroken as exc:
            if conn is not None:
                self._discard(conn)
            raise ConnectFailed(_describe(exc)) from exc
        self._release(conn)
        return status, body

    def _release(self, conn: _Connection) -> None:
        """Keep the connection for the next request if its answer was read whole, else close it."""
        if conn.complete and conn.reusable and not conn.lost and len(self._idle) < MAX_IDLE:
            conn.done()
            self._idle.append(conn)
        else:
            self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.done()
        conn.close()

    async def aclose(self) -> None:
        for conn in self._idle:
            self._discard(conn)
        self._idle.clear()
