"""app/http_protocol.py: the JSON 400 for what the parser refuses, without keeping request bodies."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any
from unittest import mock

import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from sluicegate.app import http_protocol, response_head
from sluicegate.app.http_protocol import HEAD_KEPT, JSONHttpToolsProtocol
from sluicegate.core.alarms import Alarm
from sluicegate.engines.lane import Starts


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await asyncio.sleep(3600)  # a stream that lasts: the connection stays open


@pytest.fixture
async def protocol() -> AsyncIterator[tuple[JSONHttpToolsProtocol, mock.Mock]]:
    config = uvicorn.Config(_app, log_level="error")
    config.load()
    proto = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    transport = mock.Mock()
    transport.get_extra_info.return_value = None
    transport.is_closing.return_value = False
    proto.connection_made(transport)
    yield proto, transport
    proto.connection_lost(None)
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


async def test_a_large_request_is_not_kept_for_the_connections_life(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    proto, _ = protocol
    body = b'{"model": "m", "messages": [' + b" " * 200_000 + b"]}"
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    proto.data_received(head + body)
    assert proto._head == b""


async def test_a_held_stream_keeps_no_read_of_its_request(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """The read a stream's request came in (its head and body, under `HEAD_KEPT` too) is let
    go once parsed: it stayed referenced by the protocol for the connection's life."""
    proto, _ = protocol
    body = b'{"model": "m", "messages": []}'
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    read = head + body
    held = sys.getrefcount(read)  # (bytes take no weakref)
    proto.data_received(read)
    assert proto.cycle is not None and len(read) < HEAD_KEPT  # parsed, and short
    assert sys.getrefcount(read) == held


async def test_a_connections_own_state_stays_out_of_its_dict(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """Our attributes are slots: with uvicorn's 27, a dict of more than 30 keys stops sharing
    its keys with the class's other instances (CPython's limit), 1.6 KiB a connection."""
    proto, _ = protocol
    proto.data_received(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(vars(proto)) <= 30


async def test_a_connection_makes_its_pipeline_only_when_a_request_is_pipelined(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    proto, _ = protocol
    config = uvicorn.Config(_app, log_level="error")
    config.load()
    other = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    assert proto.pipeline is other.pipeline and not proto.pipeline  # one shared, empty
    proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(proto.pipeline) == 1 and proto.pipeline is not other.pipeline
    assert not other.pipeline  # the shared one never holds a request


async def test_a_streaming_request_holds_no_parser(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """A kept-alive request read whole: the parser (912 B with its callbacks) is let go while its
    response streams, and the next request's bytes make a new one, as lenient as uvicorn's."""
    proto, transport = protocol
    proto.data_received(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    first = proto.cycle
    assert proto.parser is None and not first.more_body
    proto.data_received(b"GET /b HTTP/1.1\r\nHo")  # the next one, pipelined behind the stream
    assert proto.parser is not None  # mid-request: kept
    proto.data_received(b"st: x\r\n\r\n")
    assert proto.parser is None and proto.cycle is not first and proto.scope["path"] == "/b"
    assert len(proto.pipeline) == 1
    transport.write.assert_not_called()


@pytest.mark.parametrize(
    "head",
    [b"GET /a HTTP/1.0\r\n\r\n", b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"],
    ids=["HTTP/1.0", "Connection: close"],
)
async def test_a_request_not_kept_alive_keeps_its_parser(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock], head: bytes
) -> None:
    """After a message that closes the connection llhttp reads what follows as data after a
    close; a new parser would read it as a request, so the parser stays."""
    proto, _ = protocol
    proto.data_received(head)
    assert proto.parser is not None and proto.cycle is not None


async def test_the_connections_clock_is_an_alarm_not_a_loop_timer(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """The head's deadline from the connection's start outlives the head: as a uvloop timer it
    held ~0.5 KiB (with libuv's) in every stream younger than `header_timeout`."""
    proto, transport = protocol
    proto.header_timeout = 10.0
    proto.connection_made(transport)
    assert isinstance(proto._clock, Alarm)
    proto.data_received(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(proto._clock, Alarm) and proto._due == 0.0


async def test_header_names_are_lowercased_once_for_every_request(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """uvicorn lowercases each name into bytes of its own, per request, held in the scope for
    the stream's life; here one object per name (any casing), from a bounded table."""
    proto, transport = protocol
    config = uvicorn.Config(_app, log_level="error")
    config.load()
    other = JSONHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    other.connection_made(transport)
    proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\nX-Stainless-Lang: python\r\n\r\n")
    other.data_received(b"GET /b HTTP/1.1\r\nhost: x\r\nX-Stainless-Lang: python\r\n\r\n")
    assert proto.headers == other.headers == [(b"host", b"x"), (b"x-stainless-lang", b"python")]
    assert all(a[0] is b[0] for a, b in zip(proto.headers, other.headers, strict=True))
    other.connection_lost(None)


async def test_every_requests_scope_shares_one_asgi_entry(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """uvicorn's `{"version": ..., "spec_version": "2.3"}`, made per request (~0.2 KiB every
    stream held in its scope): one per ASGI version here, equal to uvicorn's."""
    proto, _ = protocol
    proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    first = proto.scope
    proto.data_received(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert proto.scope is not first and proto.scope["asgi"] is first["asgi"]
    assert first["asgi"] == {"version": "3.0", "spec_version": "2.3"}


def test_the_table_of_header_names_is_bounded() -> None:
    with mock.patch.dict(http_protocol._NAMES, clear=True):
        long = b"X-" + b"a" * http_protocol._NAME_KEPT
        assert http_protocol._lowered(long) == long.lower() and long not in http_protocol._NAMES
        for n in range(2 * http_protocol._NAMES_KEPT):
            assert http_protocol._lowered(b"X-Name-%d" % n) == b"x-name-%d" % n
        assert len(http_protocol._NAMES) <= http_protocol._NAMES_KEPT


async def test_a_requests_task_runs_the_apps_own_coroutine(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """No `run_asgi` coroutine around the app's (~0.25 KiB every stream held, a frame every
    step of its task passed through): what it did after the app is the task's done callback,
    and the task still leaves the server's set when done."""
    proto, _ = protocol
    proto.app = _app  # (not behind uvicorn's proxy-headers middleware)
    proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    (task,) = proto.tasks
    assert task.get_coro().cr_code is _app.__code__  # type: ignore[union-attr]
    task.cancel()
    async with asyncio.timeout(10):
        while proto.tasks:
            await asyncio.sleep(0)


class _CompiledCoroutine(Coroutine[Any, Any, None]):
    """What a compiled (mypyc) `async def` gives: a Coroutine, not a `types.CoroutineType`."""

    def send(self, value: object) -> Any:
        raise StopIteration

    def throw(self, *args: Any) -> Any:
        raise StopIteration

    def __await__(self) -> Generator[Any, None, None]:
        return (yield)


async def test_a_compiled_apps_coroutine_is_its_tasks_own_too(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """Our app is compiled: its call gives a mypyc coroutine, which the task runs itself, not
    through a coroutine around it (~0.2 KiB every stream held, a frame every step passed)."""
    proto, _ = protocol
    made: list[_CompiledCoroutine] = []

    def app(scope: Any, receive: Any, send: Any) -> _CompiledCoroutine:
        made.append(_CompiledCoroutine())
        return made[-1]

    proto.app = app  # type: ignore[assignment]
    proto.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    (task,) = proto.tasks
    assert task.get_coro() is made[0]
    async with asyncio.timeout(10):
        while proto.tasks:
            await asyncio.sleep(0)


async def test_the_flow_control_waits_for_the_drain_without_an_event(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """`Flow`: uvicorn's, its writable event a `Signal` (an `asyncio.Event` and its deque were
    ~0.9 KiB a connection); `drain` waits while writing is paused, as uvicorn's does."""
    proto, _ = protocol
    flow = proto.flow
    assert not isinstance(flow._is_writable_event, asyncio.Event)
    await flow.drain()  # writable: no wait
    proto.pause_writing()
    drained = asyncio.ensure_future(flow.drain())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not drained.done()
    proto.resume_writing()
    async with asyncio.timeout(10):
        await drained
    assert not flow.write_paused


async def test_a_refused_request_line_still_names_its_api(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    proto, transport = protocol
    proto.data_received(b"FOO /api/v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 100_000)
    written = b"".join(call.args[0] for call in transport.write.call_args_list)
    assert written.startswith(b"HTTP/1.1 400 ")
    error = orjson.loads(written.partition(b"\r\n\r\n")[2])["error"]
    assert error["message"] == "Invalid HTTP request received."
    assert "param" not in error  # LM Studio's shape, from the path


def test_a_per_response_header_value_is_not_kept_in_the_table_of_lines() -> None:
    """Every stream's `X-Request-ID` line (and its key) stayed in the table of encoded lines
    until it was emptied: ~0.3 KiB per open stream, and the lines that repeat pushed out."""
    with mock.patch.dict(response_head._lines, clear=True):
        for n in range(3):
            line, _, _ = response_head.head_line(b"x-request-id", b"chatcmpl-%d" % n)
            assert line == b"X-Request-Id: chatcmpl-%d\r\n" % n
        assert not response_head._lines
        response_head.head_line(b"content-type", b"text/event-stream")
        assert list(response_head._lines) == [(b"content-type", b"text/event-stream")]


@pytest.mark.parametrize("name", sorted(response_head.PER_RESPONSE))
def test_a_per_response_line_is_what_encode_line_makes_and_its_value_is_checked(name: bytes) -> None:
    """Such a line skips the name's checks and casing (made once), and the date's line is
    reused while the date is the same: the bytes are `encode_line`'s, a bad value still fails."""
    with mock.patch.dict(response_head._last, clear=True):
        for value in (b"Sun, 29 Nov 2026 18:00:00 GMT", b"Sun, 29 Nov 2026 18:00:00 GMT", b"chatcmpl-1"):
            assert response_head.head_line(name, value) == response_head.encode_line(name, value)
        with pytest.raises(RuntimeError, match="header value"):
            response_head.head_line(name, b"a\r\nSet-Cookie: x=1")
        assert len(response_head._last) == 1  # one line a name, the last


async def test_response_header_names_go_out_in_canonical_case(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    # uvicorn lowercases every name; clients reading headers into a plain dict (llama.cpp's
    # test client) look them up as `Access-Control-Allow-Origin`.
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"access-control-allow-origin", b"http://a.test"), (b"x-request-id", b"r:1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"content-type: x\r\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        done.set()

    proto, transport = protocol
    proto.app = app
    proto.data_received(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(10):
        await done.wait()
    written = b"".join(call.args[0] for call in transport.write.call_args_list)
    head, _, body = written.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    assert b"Access-Control-Allow-Origin: http://a.test" in lines
    assert b"X-Request-Id: r:1" in lines  # the value's own colon kept
    assert b"Transfer-Encoding: chunked" in lines
    assert b"content-type: x" in body  # a body is never touched
    assert proto.cycle is None or proto.cycle.transport is transport  # the real one back


async def test_a_request_counts_as_a_start_until_its_first_step_has_run(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """`Starts`: the fast lanes queue their reads behind a request that just arrived."""
    proto, _ = protocol
    ran: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(Starts.waiting)  # its first step: still counted, the lanes behind it
        await asyncio.sleep(3600)

    proto.app = app
    before = Starts.waiting
    proto.data_received(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert Starts.waiting == before + 1
    while not ran:
        await asyncio.sleep(0)
    assert ran == [before + 1]
    await asyncio.sleep(0)
    assert Starts.waiting == before  # the step has run: no longer ahead of the lanes


async def test_with_the_yield_off_nothing_is_counted(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SLUICEGATE_LANE_YIELDS=0 (`Starts.enabled`): a bench compares the lane with and without it."""
    proto, _ = protocol
    monkeypatch.setattr(Starts, "enabled", False)
    before = Starts.waiting
    proto.data_received(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert Starts.waiting == before


async def test_the_connections_clock_closes_only_when_what_is_due_has_passed(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """One timer for the head's and the keep-alive's deadlines: moving a deadline later sets
    `_due` only, and the timer, firing before it, waits again instead of closing."""
    proto, transport = protocol
    proto._due = proto.loop.time() + 100  # moved later since the timer was set
    proto._tick()
    transport.close.assert_not_called()
    assert proto._clock is not None and proto._clock_at == proto._due
    proto._due = 0.0  # nothing due (a request is being served)
    proto._tick()
    transport.close.assert_not_called()
    assert proto._clock is None
    proto._due = proto.loop.time() - 1  # passed: a head too slow, an idle connection
    proto._tick()
    transport.close.assert_called_once()


async def test_a_response_then_the_next_request_moves_the_one_deadline(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """Keep-alive after a response, the head's deadline from the next request's first byte,
    nothing while a request is served: all on the one clock, no timer per request."""
    proto, transport = protocol
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        done.set()

    proto.app = app
    proto.header_timeout = 3.0  # before uvicorn's keep-alive (5 s): the clock never moves earlier
    proto.connection_made(transport)  # the connection's start, with a head deadline this time
    clock = proto._clock
    assert clock is not None and proto._in_head
    proto.data_received(b"GET /x HTTP/1.1\r\nHost: x\r\n")
    proto.data_received(b"\r\n")
    assert proto._due == 0.0  # served: nothing due
    async with asyncio.timeout(10):
        await done.wait()
    assert proto._idle and proto._due > proto.loop.time()  # keep-alive due
    proto.data_received(b"GET /x HTTP/1.1\r\n")  # the next head begins
    assert not proto._idle and proto._in_head
    assert proto._due == pytest.approx(proto.loop.time() + 3.0, abs=1.0)
    assert proto._clock is clock  # the same timer throughout


async def test_a_body_that_comes_after_the_head_is_waited_for(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    """`Signal`, the cycle's event: the request's task waits in `receive` until the body's bytes
    come, then gets them; a client that leaves meanwhile is a disconnect."""
    proto, _ = protocol
    got: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got.append(await receive())
        got.append(await receive())

    proto.app = app
    proto.data_received(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
    for _ in range(5):
        await asyncio.sleep(0)  # the task runs and waits: nothing to read yet
    assert got == []
    proto.data_received(b"abc")
    async with asyncio.timeout(10):
        while not got:
            await asyncio.sleep(0)
    assert got == [{"type": "http.request", "body": b"abc", "more_body": True}]
    proto.connection_lost(None)  # the client leaves while the task waits for the rest
    async with asyncio.timeout(10):
        while len(got) < 2:
            await asyncio.sleep(0)
    assert got[1] == {"type": "http.disconnect"}


async def test_the_signal_wakes_every_waiter_and_survives_a_cancelled_one() -> None:
    from sluicegate.app.http_protocol import Signal

    signal = Signal()
    first = asyncio.ensure_future(signal.wait())
    second = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    signal.set()
    async with asyncio.timeout(10):
        assert await second is True
    assert first.cancelled() and signal.is_set() and signal._waiters == []
    signal.clear()
    assert not signal.is_set()


def test_the_servers_default_lines_are_joined_once_per_list() -> None:
    """uvicorn's `Date` and `Server` lines (a new list each second) were looked up line by line
    in every head: now joined once for the list, the same bytes as line by line."""
    defaults = [(b"date", b"Sun, 29 Nov 2026 18:00:00 GMT"), (b"server", b"uvicorn")]
    expected = b"".join(response_head.head_line(n, v)[0] for n, v in defaults)
    with mock.patch.object(response_head, "_defaults", [None, b""]):
        assert response_head.default_lines(defaults) == expected
        with mock.patch.object(response_head, "head_line", side_effect=AssertionError):
            assert response_head.default_lines(defaults) == expected  # the same list: no line made
        later = [(b"date", b"Sun, 29 Nov 2026 18:00:01 GMT"), (b"server", b"uvicorn")]
        assert response_head.default_lines(later) == b"".join(
            response_head.head_line(n, v)[0] for n, v in later
        )
        # A configured line that means something to the framing goes line by line, as before.
        assert response_head.default_lines([(b"connection", b"close")]) is None


async def test_the_head_carries_the_servers_default_lines_then_the_apps(
    protocol: tuple[JSONHttpToolsProtocol, mock.Mock],
) -> None:
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})
        done.set()

    proto, transport = protocol
    proto.app = app
    proto.server_state.default_headers = [
        (b"date", b"Sun, 29 Nov 2026 18:00:00 GMT"),
        (b"server", b"sluicegate"),
    ]
    proto.data_received(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(10):
        await done.wait()
    written = b"".join(call.args[0] for call in transport.write.call_args_list)
    head = written.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[1:4] == [
        b"Date: Sun, 29 Nov 2026 18:00:00 GMT",
        b"Server: sluicegate",
        b"Content-Type: text/plain",
    ]


@pytest.mark.parametrize(
    ("headers", "framing"),
    [
        ([(b"content-type", b"text/plain"), (b"content-length", b"12")], (False, 12, False)),
        ([(b"content-length", b"12"), (b"transfer-encoding", b"chunked")], (True, 0, False)),
        ([(b"transfer-encoding", b"chunked"), (b"content-length", b"12")], (True, 0, False)),
        ([(b"connection", b"keep-alive, close")], (None, 0, True)),
        ([], (None, 0, False)),
    ],
)
def test_a_heads_lines_and_framing_in_one_pass(
    headers: list[tuple[bytes, bytes]], framing: tuple[Any, ...]
) -> None:
    """`head_block` (compiled) reads the lines as uvicorn does, in order: a length when no
    framing is chosen yet, chunked over it, a `close`; its bytes are the lines one by one."""
    defaults = [(b"date", b"Sun, 29 Nov 2026 18:00:00 GMT"), (b"server", b"sluicegate")]
    lines, chunked, length, close = response_head.head_block(defaults, headers, None, 0)
    assert lines == b"".join(response_head.head_line(n, v)[0] for n, v in defaults + headers)
    assert (chunked, length, close) == framing
