"""What app/http_protocol.py relies on in uvicorn beyond its public API, checked on the uvicorn
installed: a release that renames, removes or changes one of these fails here, by name, before
a stream goes wrong in production. pyproject.toml pins uvicorn to the versions this passed on;
to move the pin, run this test on the new release.

Relied on: `HttpToolsProtocol`'s hooks (`connection_made`, `data_received`, `on_message_begin`,
`on_headers_complete`, `connection_lost`, `send_400_response`) and its `flow.write_paused`,
`transport`, `loop`, `scope`, `cycle`, `url`; `RequestResponseCycle`'s `chunked_encoding`,
`response_complete`, `disconnected`, `scope` and `send`, and the chunk framing of its `send`.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from sluicegate.app.http_protocol import CycleWriter, JSONHttpToolsProtocol
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
