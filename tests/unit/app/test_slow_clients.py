"""Slow and idle clients are closed: a connection that sends its request head a byte at a time,
or nothing at all, or sits idle after a response, is cut after `header_timeout_seconds` /
`keep_alive_seconds` (2,000 such connections were once held open for as long as they liked).
A real uvicorn server with our options, driven by raw sockets that wait for the server to close."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from sluicegate.app.serving import uvicorn_options
from sluicegate.config import Settings

LIMIT = 0.5  # both limits, in seconds
HANG = 30.0  # bounds a hang only


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def port() -> Iterator[int]:
    settings = Settings(port=0, header_timeout_seconds=LIMIT, keep_alive_seconds=LIMIT, log_level="error")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    options = {**uvicorn_options(settings), "port": free, "lifespan": "off"}
    server = uvicorn.Server(uvicorn.Config(_app, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield free
    server.should_exit = True
    thread.join(HANG)


def _closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(HANG)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert _closed_by_server(sock) == b""


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(port: int) -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100_000
    with socket.create_connection(("127.0.0.1", port)) as sock:
        deadline = time.monotonic() + HANG
        for byte in head:
            assert time.monotonic() < deadline, "the server kept a dribbling client"
            try:
                sock.send(bytes([byte]))
            except OSError:
                break  # reset: closed
            readable, _, _ = select.select([sock], [], [], 0.01)  # a byte every 10 ms at most
            if readable:
                assert _closed_by_server(sock) == b""
                break
        else:
            raise AssertionError("the whole head was sent without the server closing")


def test_an_idle_keep_alive_connection_is_closed_after_its_response(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _closed_by_server(sock)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")


def test_the_settings_reach_uvicorn() -> None:
    options = uvicorn_options(Settings(header_timeout_seconds=7, keep_alive_seconds=3))
    assert options["timeout_keep_alive"] == 3
    config = uvicorn.Config(_app, **options)
    config.load()
    assert config.http_protocol_class.keywords["header_timeout"] == 7  # type: ignore[attr-defined]


def test_no_proxy_header_layer_wraps_the_app() -> None:
    """Nothing in Sluicegate reads the client's address or scheme, so uvicorn's layer that
    rewrites them from X-Forwarded-* is not put around every request."""
    config = uvicorn.Config(_app, **uvicorn_options(Settings()))
    config.load()
    assert not isinstance(config.loaded_app, ProxyHeadersMiddleware)
