"""What app/http_protocol.py relies on in uvicorn beyond its public API, checked on the uvicorn
installed: a release that renames, removes or changes one of these fails here, by name, before
a stream goes wrong in production. pyproject.toml pins uvicorn to the versions this passed on;
to move the pin, run this test on the new release.

Relied on: `HttpToolsProtocol`'s hooks (`connection_made`, `data_received`, `on_message_begin`,
`on_header`, `on_headers_complete`, `on_message_complete`, `_start_asgi_task`, `connection_lost`,
`send_400_response`), how its `__init__` makes the parser (ours makes it again per request), the state and helpers our own
hooks use in their place (`flow.write_paused`, `transport`, `loop`, `scope`, `cycle`, `url`,
`_should_upgrade`, `_start_asgi_task`, `timeout_keep_alive`, `pipeline`, ...; our
`on_response_complete` replaces uvicorn's, which its cycle calls);
`RequestResponseCycle`'s constructor, state and `send`, which our `Cycle` replaces: its head,
its chunk framing and its ends are compared with uvicorn's own, byte for byte (the names in
canonical case), and so is what its `run_asgi` does after an app that breaks the conversation
(ours is the task's done callback).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from sluicegate.app import http_protocol, response_head
from sluicegate.app.http_protocol import Cycle, CycleWriter, JSONHttpToolsProtocol
from sluicegate.transport.stream import BODY_WRITER

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite
REQUEST = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
HOOKS = (
    "connection_made",
    "data_received",
    "on_message_begin",
    "on_headers_complete",
    "connection_lost",
    "send_400_response",
    "on_message_complete",
    "on_header",
    "_start_asgi_task",
)


class Socket(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_the_protocol_hooks_we_override_exist_with_their_signatures() -> None:
    base = httptools_impl.HttpToolsProtocol
    for name in HOOKS:
        assert callable(getattr(base, name, None)), f"uvicorn's HttpToolsProtocol has no {name}"
    params = {name: list(inspect.signature(getattr(base, name)).parameters) for name in HOOKS}
    assert params["connection_made"][:2] == ["self", "transport"]
    assert params["data_received"][:2] == ["self", "data"]
    assert params["connection_lost"][:2] == ["self", "exc"]
    assert params["send_400_response"][:2] == ["self", "msg"]
    assert params["on_message_begin"] == ["self"] and params["on_headers_complete"] == ["self"]


async def test_the_cycle_and_flow_state_we_read_behave_as_we_read_it() -> None:
    seen: dict[str, Any] = {}
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        writer = scope[BODY_WRITER]
        assert isinstance(writer, CycleWriter)
        cycle = writer._cycle
        assert isinstance(cycle, httptools_impl.RequestResponseCycle)
        seen["before head"] = cycle.chunked_encoding
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen["chunked"] = cycle.chunked_encoding
        seen["complete, disconnected"] = (cycle.response_complete, cycle.disconnected)
        seen["method"] = cycle.scope["method"]
        # Our write frames a chunk exactly as uvicorn's `send` does.
        mark = len(wire.written)
        await cycle.send({"type": "http.response.body", "body": b"abc", "more_body": True})
        seen["send frames"] = bytes(wire.written[mark:])
        mark = len(wire.written)
        assert writer.write(b"abc")
        seen["write frames"] = bytes(wire.written[mark:])
        # The flow control `write` reads: paused above the high-water mark, not below.
        flow = proto.flow
        assert isinstance(flow, FlowControl)
        proto.pause_writing()
        seen["paused"] = flow.write_paused
        seen["write while paused"] = writer.write(b"x")
        proto.resume_writing()
        seen["resumed"] = flow.write_paused
        await writer.end(True)
        seen["complete after end"] = cycle.response_complete
        done.set()

    config = uvicorn.Config(app, log_level="error")
    config.load()
    proto = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    wire = Socket()
    proto.connection_made(wire)
    assert proto.transport is wire and proto.loop is asyncio.get_running_loop()
    proto.data_received(REQUEST)
    async with asyncio.timeout(LIMIT):
        await done.wait()
    assert seen["before head"] is not True
    assert seen["chunked"] is True
    assert seen["complete, disconnected"] == (False, False)
    assert seen["method"] == "POST"
    assert seen["send frames"] == b"3\r\nabc\r\n" == seen["write frames"]
    assert (seen["paused"], seen["write while paused"], seen["resumed"]) == (True, False, False)
    assert seen["complete after end"] is True
    assert wire.written.endswith(b"0\r\n\r\n")
    proto.connection_lost(None)


async def test_a_lost_connection_marks_the_cycle_disconnected_and_calls_the_watcher() -> None:
    lost: list[str] = []
    started = asyncio.Event()
    held: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        writer = scope[BODY_WRITER]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        assert writer.watch(lambda: lost.append("lost"))
        held["cycle"] = writer._cycle
        started.set()
        await asyncio.sleep(3600)

    config = uvicorn.Config(app, log_level="error")
    config.load()
    proto = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    wire = Socket()
    proto.connection_made(wire)
    proto.data_received(REQUEST)
    async with asyncio.timeout(LIMIT):
        await started.wait()
    assert proto.cycle is held["cycle"] and proto.scope is held["cycle"].scope
    proto.connection_lost(None)
    assert lost == ["lost"]
    assert held["cycle"].disconnected is True
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


def test_a_request_the_parser_refuses_reaches_send_400_response() -> None:
    # The JSON 400 hook: uvicorn calls it with the parser's message, and `url` is where the
    # path was parsed to (empty when the request line broke first).
    source = inspect.getsource(httptools_impl.HttpToolsProtocol.data_received)
    assert "send_400_response" in source
    assert "self.url" in inspect.getsource(httptools_impl.HttpToolsProtocol.on_url)


PROTOCOL_STATE = (
    "parser", "flow", "transport", "loop", "logger", "server", "client", "scheme", "root_path",
    "asgi_version", "app_state", "app", "limit_concurrency", "connections", "tasks",
    "server_state", "pipeline", "timeout_keep_alive", "expect_100_continue", "headers",
    "access_log", "access_logger", "config",
)  # fmt: skip
PROTOCOL_HELPERS = (
    "_should_upgrade",
    "handle_websocket_upgrade",
    "_unsupported_upgrade_warning",
    "_start_asgi_task",
    "on_response_complete",
)


async def test_the_protocol_state_and_helpers_our_hooks_use_exist() -> None:
    config = uvicorn.Config(lambda *a: None, log_level="error")
    config.load()
    proto = httptools_impl.HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    proto.connection_made(Socket())
    for name in PROTOCOL_STATE:
        assert hasattr(proto, name), f"uvicorn's HttpToolsProtocol has no {name}"
    for name in PROTOCOL_HELPERS:
        assert callable(getattr(proto, name, None)), f"uvicorn's HttpToolsProtocol has no {name}()"
    assert list(inspect.signature(proto._start_asgi_task).parameters) == ["cycle", "app"]
    # The scope our `on_message_begin` builds is uvicorn's, key for key.
    ours = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    ours.connection_made(Socket())
    proto.on_message_begin()
    ours.on_message_begin()
    assert ours.scope == proto.scope
    proto.connection_lost(None)
    ours.connection_lost(None)


def test_the_cycle_is_built_as_uvicorn_builds_it() -> None:
    """`Cycle` keeps uvicorn's constructor: the same keywords, the same state after it."""
    params = list(inspect.signature(httptools_impl.RequestResponseCycle.__init__).parameters)
    assert params == [
        "self", "scope", "transport", "flow", "logger", "access_logger", "access_log",
        "default_headers", "message_event", "expect_100_continue", "keep_alive", "on_response",
    ]  # fmt: skip
    assert Cycle.__init__ is httptools_impl.RequestResponseCycle.__init__
    assert response_head.HEADER_RE.pattern == httptools_impl.HEADER_RE.pattern
    assert response_head.HEADER_VALUE_RE.pattern == httptools_impl.HEADER_VALUE_RE.pattern


def _cased(head: bytes) -> bytes:
    """uvicorn's head with each name in canonical case: what ours must write."""
    status, _, rest = head.partition(b"\r\n")
    lines = [status]
    for line in rest.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        lines.append(name.title() + colon + value if colon else line)
    return b"\r\n".join(lines)


CONVERSATIONS: list[tuple[str, bool, list[dict[str, Any]]]] = [
    (  # a stream: no length, chunked by the server
        "POST",
        True,
        [
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"connection", b"keep-alive"),
                    (b"x-accel-buffering", b"no"),
                    (b"x-request-id", b"r:1"),
                ],
            },
            {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
            {"type": "http.response.body", "body": b"", "more_body": True},
            {"type": "http.response.body", "body": b"data: [DONE]\n\n"},
        ],
    ),
    (  # a JSON answer with its length
        "GET",
        True,
        [
            {
                "type": "http.response.start",
                "status": 404,
                "headers": [
                    (b"Content-Type", b"application/json"),
                    (b"content-length", b"2"),
                    (b"Access-Control-Allow-Origin", b"http://a.test"),
                ],
            },
            {"type": "http.response.body", "body": b"{}"},
        ],
    ),
    (  # the app closes the connection; a transfer encoding of its own; a last chunk with data
        "POST",
        True,
        [
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"connection", b"Keep-Alive, Close"),
                    (b"transfer-encoding", b"chunked"),
                ],
            },
            {"type": "http.response.body", "body": b"abc", "more_body": False},
        ],
    ),
    ("HEAD", True, [{"type": "http.response.start", "status": 200}, {"type": "http.response.body"}]),
    ("GET", True, [{"type": "http.response.start", "status": 204}, {"type": "http.response.body"}]),
    (  # HTTP/1.0 or a client's `Connection: close`: the server adds it
        "GET",
        False,
        [
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]},
            {"type": "http.response.body", "body": b"x"},
        ],
    ),
]


@pytest.mark.parametrize(("method", "keep_alive", "messages"), CONVERSATIONS)
async def test_our_cycle_writes_what_uvicorns_writes(
    method: str, keep_alive: bool, messages: list[dict[str, Any]]
) -> None:
    written: dict[str, tuple[bytes, bool, bool, bool]] = {}
    for label, cls in (("uvicorn", httptools_impl.RequestResponseCycle), ("ours", Cycle)):
        wire = Socket()
        ended: list[bool] = []
        server = ServerState()
        server.default_headers = [(b"date", b"Sun, 29 Nov 2026 12:00:00 GMT"), (b"server", b"uvicorn")]
        cycle = cls(
            scope={"type": "http", "method": method, "path": "/", "http_version": "1.1"},  # type: ignore[typeddict-item]
            transport=wire,
            flow=FlowControl(wire),
            logger=httptools_impl.logging.getLogger("t"),
            access_logger=httptools_impl.logging.getLogger("t"),
            access_log=False,
            default_headers=server.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=keep_alive,
            on_response=functools.partial(ended.append, True),
        )
        for message in messages:
            await cycle.send(message)  # type: ignore[arg-type]
        written[label] = (bytes(wire.written), cycle.response_complete, wire.closing, bool(ended))
    head, _, body = written["uvicorn"][0].partition(b"\r\n\r\n")
    assert written["ours"] == (_cased(head) + b"\r\n\r\n" + body, *written["uvicorn"][1:])
    with pytest.raises(RuntimeError):  # after the end, as uvicorn's
        await cycle.send({"type": "http.response.body", "body": b""})


async def test_a_bad_header_is_refused_as_uvicorn_refuses_it() -> None:
    for headers, message in (
        ([(b"bad name", b"x")], "Invalid HTTP header name."),
        ([(b"x-ok", b"a\nb")], "Invalid HTTP header value."),
    ):
        wire = Socket()
        cycle = Cycle(
            scope={"type": "http", "method": "GET", "path": "/", "http_version": "1.1"},  # type: ignore[typeddict-item]
            transport=wire,
            flow=FlowControl(wire),
            logger=httptools_impl.logging.getLogger("t"),
            access_logger=httptools_impl.logging.getLogger("t"),
            access_log=False,
            default_headers=[],
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
        with pytest.raises(RuntimeError, match=message):
            await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
        assert wire.written == b""


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    """Answers with what the scope and the body were: the two protocols must agree on them."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    seen = [scope["method"], scope["path"], scope["raw_path"].decode(), scope["query_string"].decode(),
            scope["http_version"], len(body), sorted(k for k in scope if not k.startswith("sluicegate")),
            scope["headers"], scope["asgi"]]  # fmt: skip
    text = repr(seen).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for _ in range(3):  # a pipelined request's answer must wait for this one's end
        await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": text, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


WIRE_CASES = {
    "two pipelined requests": b"GET /a?x=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /b%20c HTTP/1.1\r\nHost: x\r\n\r\n",
    "100-continue": b"POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    "HEAD": b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n",
    "HTTP/1.0": b"GET /old HTTP/1.0\r\n\r\n",
}


# Several reads: our protocol lets its parser go after a kept-alive request's end and makes a
# new one for the next bytes; uvicorn keeps one parser for the connection's life. (reads, how
# many responses uvicorn gives)
READ_CASES = {
    "the next request in a later read": (
        [b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"],
        2,
    ),
    "a head split across reads, then the next": (
        [b"GET /a HTTP/1.1\r\nHo", b"st: x\r\n\r\nGET /b HT", b"TP/1.1\r\nHost: x\r\n\r\n"],
        2,
    ),
    "a body in its own read, then a chunked request": (
        [
            b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n",
            b"abc",
            b"POST /q HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ],
        2,
    ),
    "HTTP/1.0, then more bytes": ([b"GET /old HTTP/1.0\r\n\r\n", b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"], 1),
    "Connection: close, then more bytes": (
        [b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"],
        1,
    ),
}
CASES = {name: ([raw], raw.count(b" HTTP/1.")) for name, raw in WIRE_CASES.items()} | READ_CASES


@pytest.mark.parametrize(("reads", "answers"), CASES.values(), ids=list(CASES))
async def test_our_protocol_answers_on_the_wire_as_uvicorns(reads: list[bytes], answers: int) -> None:
    """The same bytes into uvicorn's protocol and ours, the same app: the same bytes out (names
    cased), the same scope, the connection closed or kept alike."""
    out: dict[str, tuple[bytes, bool]] = {}
    for label, cls in (("uvicorn", httptools_impl.HttpToolsProtocol), ("ours", JSONHttpToolsProtocol)):
        config = uvicorn.Config(_echo, log_level="error", proxy_headers=False)
        config.load()
        server = ServerState()
        server.default_headers = [(b"server", b"uvicorn")]
        proto = cls(config=config, server_state=server, app_state={})
        wire = Socket()
        proto.connection_made(wire)
        for read in reads:
            proto.data_received(read)
            for _ in range(20):  # the same turns of the loop for both: a response under way or done
                await asyncio.sleep(0)
        async with asyncio.timeout(LIMIT):
            while server.total_requests < answers:
                await asyncio.sleep(0)
        for _ in range(20):  # nothing more comes
            await asyncio.sleep(0)
        out[label] = (bytes(wire.written), wire.closing)
        proto.connection_lost(None)
    expected = b"".join(
        _cased(head) + b"\r\n\r\n" + rest if head.startswith(b"HTTP/1.1 2") else head + b"\r\n\r\n" + rest
        for head, rest in _responses(out["uvicorn"][0])
    )
    assert out["ours"] == (expected, out["uvicorn"][1])


async def _raises_first(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("a bug")


async def _raises_later(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"part", "more_body": True})
    raise RuntimeError("a bug")


async def _never_starts(scope: Any, receive: Any, send: Any) -> None:
    await asyncio.sleep(0)


async def _never_completes(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})


async def _returns_something(scope: Any, receive: Any, send: Any) -> Any:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})
    return 42


def _raises_when_called(scope: Any, receive: Any, send: Any) -> Any:
    raise RuntimeError("a bug in a plain call")


async def _cancelled(scope: Any, receive: Any, send: Any) -> None:
    raise asyncio.CancelledError


class _Awaitable:
    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.send = send

    def __await__(self) -> Any:
        yield from self.send({"type": "http.response.start", "status": 204, "headers": []}).__await__()
        yield from self.send({"type": "http.response.body", "body": b""}).__await__()


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


BROKEN_APPS = {
    "raises before the start": _raises_first,
    "raises after the start": _raises_later,
    "never starts": _never_starts,
    "never completes": _never_completes,
    "returns a value": _returns_something,
    "raises when called": _raises_when_called,
    "cancelled": _cancelled,
    "an awaitable, not a coroutine": _Awaitable,
}


@pytest.mark.parametrize("app", BROKEN_APPS.values(), ids=list(BROKEN_APPS))
async def test_an_app_that_breaks_the_asgi_conversation_is_answered_as_uvicorn_answers(app: Any) -> None:
    """uvicorn's `run_asgi` (the errors after the app, a 500 or a close) is our task's done
    callback: the same bytes, the same close, the same log lines; the task leaves the set."""
    out: dict[str, tuple[bytes, bool, list[str]]] = {}
    for label, cls in (("uvicorn", httptools_impl.HttpToolsProtocol), ("ours", JSONHttpToolsProtocol)):
        config = uvicorn.Config(app, log_level="error", proxy_headers=False)
        config.load()
        server = ServerState()
        proto = cls(config=config, server_state=server, app_state={})
        wire = Socket()
        proto.connection_made(wire)
        handler = _Kept()
        logging.getLogger("uvicorn.error").addHandler(handler)
        try:
            proto.data_received(REQUEST)
            async with asyncio.timeout(LIMIT):
                while server.tasks or not (wire.closing or server.total_requests):
                    await asyncio.sleep(0)
            for _ in range(5):
                await asyncio.sleep(0)
        finally:
            logging.getLogger("uvicorn.error").removeHandler(handler)
        out[label] = (bytes(wire.written), wire.closing, handler.lines)
        proto.connection_lost(None)
    expected = b"".join(
        (_cased(head) if b"\r\n" in head else head) + b"\r\n\r\n" + rest
        for head, rest in _responses(out["uvicorn"][0])
    )
    assert out["ours"] == (expected, *out["uvicorn"][1:])
    assert out["ours"][2] or app is _Awaitable  # (each broken case logs)


def _responses(written: bytes) -> list[tuple[bytes, bytes]]:
    """Each head and what follows it up to the next head (a 100 Continue is a head of its own)."""
    parts = written.split(b"HTTP/1.1 ")
    found = []
    for part in parts[1:]:
        head, _, rest = (b"HTTP/1.1 " + part).partition(b"\r\n\r\n")
        found.append((head, rest))
    return found


def test_the_parser_is_made_and_a_message_ends_as_uvicorn_does_it() -> None:
    """Our protocol lets its parser go between kept-alive requests and makes the next one with
    `new_parser`, which must be what uvicorn's `__init__` makes; our `on_message_complete` is
    uvicorn's, line for line, plus a flag."""
    made = inspect.getsource(httptools_impl.HttpToolsProtocol.__init__)
    assert "self.parser = httptools.HttpRequestParser(self)" in made
    assert made.count("set_dangerous_leniencies(") == 1
    assert "self.parser.set_dangerous_leniencies(lenient_data_after_close=True)" in made
    ours = inspect.getsource(http_protocol.new_parser)
    assert "httptools.HttpRequestParser(protocol)" in ours
    assert "parser.set_dangerous_leniencies(lenient_data_after_close=True)" in ours
    header = inspect.getsource(httptools_impl.HttpToolsProtocol.on_header)
    assert [line.strip() for line in header.splitlines()[1:]] == [
        "name = name.lower()",  # ours: the same bytes, from `_NAMES`
        'if name == b"expect" and value.lower() == b"100-continue":',
        "self.expect_100_continue = True",
        "self.headers.append((name, value))",
    ]
    start = inspect.getsource(httptools_impl.HttpToolsProtocol._start_asgi_task)
    assert "self.loop.create_task(cycle.run_asgi(app), context=contextvars.Context())" in start
    assert (
        "task = self.loop.create_task(cycle.run_asgi(app))\n"
        "        task.add_done_callback(self.tasks.discard)\n        self.tasks.add(task)\n"
    ) in start
    ended = inspect.getsource(httptools_impl.HttpToolsProtocol.on_message_complete).split('"""')[-1]
    body = [line.strip() for line in ended.splitlines()[1:] if line.strip()]
    assert body == [
        "if (self.parser.should_upgrade() and self._should_upgrade()) or self.cycle.response_complete:",
        "return",
        "self.cycle.more_body = False",
        "self.cycle.message_event.set()",
    ]


async def test_our_connection_made_and_flow_set_up_what_uvicorns_do() -> None:
    """Our `connection_made` and `Flow` replace uvicorn's (no `asyncio.Event` per connection):
    the same attributes, set the same, and the pipeline touched only by hooks we replace."""
    config = uvicorn.Config(lambda *a: None, log_level="error")
    config.load()
    theirs = httptools_impl.HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    ours = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    theirs.connection_made(Socket())
    ours.connection_made(Socket())
    assert set(vars(theirs)) == set(vars(ours))
    for name in ("server", "client", "scheme"):
        assert getattr(ours, name) == getattr(theirs, name)
    assert ours in ours.connections
    assert isinstance(ours.flow, FlowControl) and ours.flow._transport is ours.transport
    assert set(vars(ours.flow)) == set(vars(theirs.flow))
    assert [vars(ours.flow)[k] for k in ("read_paused", "write_paused")] == [False, False]
    assert ours.flow._is_writable_event.is_set() and theirs.flow._is_writable_event.is_set()
    source = inspect.getsource(httptools_impl.HttpToolsProtocol.connection_made)
    assert source.count("self.") == 10  # six set, four in the trace log: a change fails here
    users = [
        name
        for name, member in vars(httptools_impl.HttpToolsProtocol).items()
        if inspect.isfunction(member) and "self.pipeline" in inspect.getsource(member)
    ]
    assert sorted(users) == ["__init__", "on_headers_complete", "on_response_complete"]
    ours.connection_lost(None)
    theirs.connection_lost(None)
