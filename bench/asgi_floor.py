"""The floor of the stack Sluicegate runs on: the least an ASGI application served by uvicorn
(httptools, uvloop, Python 3.11) spends on the request `bench/gateway.py` measures, for
`gateway.py --targets asgi-floor,asgi-static` and `bench/instructions.py --floor`.

    python bench/asgi_floor.py --port PORT --upstream PORT [--static] [--stock]

Served as `sluicegate serve` serves Sluicegate (`app/serving.py`): the same uvicorn options
(`uvicorn_options`: Sluicegate's httptools protocol class, keep-alive, access log and proxy
headers off, no log config), uvloop, one process, the collector settled after startup
(`settled_server`). `--stock`: uvicorn's own `HttpToolsProtocol` instead of Sluicegate's
subclass of it (the same options otherwise).

The app is raw ASGI and does, per request, what Sluicegate's Chat Completions relay must do at
the least, and nothing more (no parsing, validation, routing, metrics, ids): it reads the
request's body from `receive`, writes it upstream over a kept-alive connection from a small
pool (the same path, a fixed head with its length), and relays the upstream's answer as it
arrives: `http.response.start` when the first read comes in, then one `http.response.body`
per upstream read with that read's bytes (the upstream's chunks de-chunked, the same SSE
bytes), the last read's with `more_body=False`. The upstream connection is an
`asyncio.Protocol` with httptools' C parser, not streams: a read is one callback that feeds the
parser and wakes the request's task through one future, where a `StreamReader` adds a buffer,
a lock-step `readuntil` in Python and its own waiter for the same wake-up. The floor does not
watch for the client leaving: an ASGI app learns that only from `receive()`, which costs a task
per request; it relays to the end of the upstream's answer and uvicorn drops the writes.

`--static`: no upstream; every POST is answered with the fake upstream's one-token stream
(role, one token, finish, usage, `[DONE]`) in one body: uvicorn's own floor per request.

A GET (the benches' `/health`) is answered `{}`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httptools

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
HEALTH_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json")],
}
HEALTH_BODY = {"type": "http.response.body", "body": b"{}"}
KEEP_IDLE = 256  # idle upstream connections kept (nginx's `keepalive 256` in gateway.py, Sluicegate's pool)


class Upstream(asyncio.Protocol):
    """One kept-alive upstream connection, one answer at a time: a read feeds the parser, and
    what it held wakes the waiting request once."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.complete = False
        self.lost = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not asyncio's class

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)
        waiter = self.waiter
        if waiter is not None and (self.body or self.complete):
            self.waiter = None
            waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            self.waiter = None
            waiter.set_exception(ConnectionError(f"upstream connection lost: {exc}"))

    async def read(self) -> tuple[bytes, bool]:
        """What the next read(s) held, and whether the answer is complete."""
        if not self.body and not self.complete:
            if self.lost:
                raise ConnectionError("upstream connection lost")
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        body = self.body
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        return data, self.complete

    def reset(self) -> None:
        """Ready for the connection's next answer."""
        self.parser = httptools.HttpResponseParser(self)
        self.complete = False


class Pool:
    """Idle upstream connections, newest first; a new one when none is idle."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: list[Upstream] = []
        # the request's head, its path, length and body filled in per request in one formatting
        self.request = (
            b"POST %%b HTTP/1.1\r\nhost: %b:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %%d\r\n\r\n%%b" % (host.encode(), port)
        )

    async def get(self) -> Upstream:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.lost:
                return conn
        _, conn = await asyncio.get_running_loop().create_connection(Upstream, self.host, self.port)
        return conn

    def put(self, conn: Upstream) -> None:
        if conn.lost or len(self.idle) >= KEEP_IDLE:
            if conn.transport is not None:
                conn.transport.close()
            return
        conn.reset()
        self.idle.append(conn)


def relay_app(upstream_host: str, upstream_port: int) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    pool = Pool(upstream_host, upstream_port)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await not_relayed(scope, receive, send)
            return
        message = await receive()
        body = message.get("body", b"")
        while message.get("more_body"):
            message = await receive()
            body += message.get("body", b"")
        conn = await pool.get()
        assert conn.transport is not None
        conn.transport.write(pool.request % (scope["raw_path"], len(body), body))
        data, done = await conn.read()
        await send(
            {"type": "http.response.start", "status": conn.parser.get_status_code(), "headers": HEADERS}
        )
        while not done:
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            data, done = await conn.read()
        await send({"type": "http.response.body", "body": data, "more_body": False})
        pool.put(conn)

    return app


def one_token_stream() -> bytes:
    """The fake upstream's one-token answer, de-chunked: the SSE bytes a relay passes on."""
    from fast_upstream import Frames  # a sibling in bench/

    frames = Frames("fake-d0", 1)
    chunked = frames.role + frames.tokens[0] + frames.finish + frames.usage(1) + frames.done
    parts: list[bytes] = []
    parser = httptools.HttpResponseParser(type("Sink", (), {"on_body": staticmethod(parts.append)})())
    parser.feed_data(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunked)
    return b"".join(parts)


def static_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    start = {"type": "http.response.start", "status": 200, "headers": HEADERS}
    answer = {"type": "http.response.body", "body": one_token_stream(), "more_body": False}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await not_relayed(scope, receive, send)
            return
        message = await receive()
        while message.get("more_body"):
            message = await receive()
        await send(start)
        await send(answer)

    return app


async def not_relayed(scope: Scope, receive: Receive, send: Send) -> None:
    """What both apps answer besides a POST: the lifespan, and `{}` to a GET (`/health`). A
    POST takes the same two scope reads as before and no frame more (the floor is measured)."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
    elif scope["type"] == "http":
        await send(HEALTH_START)
        await send(HEALTH_BODY)


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def serve(app: Callable[[Scope, Receive, Send], Awaitable[None]], port: int, stock: bool) -> None:
    """As `sluicegate serve` runs one process (`app/serving.py` `serve_one`)."""
    from sluicegate.app.serving import settled_server, uvicorn_options
    from sluicegate.config import Settings

    options = uvicorn_options(Settings(host="127.0.0.1", port=port))
    if stock:
        options["http"] = "httptools"
    from uvicorn.config import Config

    server = settled_server()(Config(app, **{**options, "log_level": "warning"}))
    server.run()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", type=int, help="the fake upstream's port (not with --static)")
    parser.add_argument("--static", action="store_true", help="no upstream: a fixed one-token answer")
    parser.add_argument(
        "--stock", action="store_true", help="uvicorn's own httptools protocol, not Sluicegate's subclass"
    )
    args = parser.parse_args()
    if args.static:
        app = static_app()
    elif args.upstream is None:
        parser.error("--upstream PORT (or --static)")
    else:
        app = relay_app("127.0.0.1", args.upstream)
    serve(app, args.port, args.stock)


if __name__ == "__main__":
    main()
