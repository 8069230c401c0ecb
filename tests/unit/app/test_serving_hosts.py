"""`[server] host` listing several addresses (llama-server's `--host 127.0.0.1,::1`): one server
answers on each."""

from __future__ import annotations

import socket
import threading
from dataclasses import replace

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sluicegate.app import serving
from sluicegate.config import Settings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_hosts_and_the_startup_line() -> None:
    settings = replace(Settings(), host="127.0.0.1, ::1", port=8080)
    assert serving.hosts(settings) == ["127.0.0.1", "::1"]
    assert serving.address_list(settings) == "http://127.0.0.1:8080, http://[::1]:8080"
    assert serving.hosts(replace(Settings(), host="0.0.0.0")) == ["0.0.0.0"]


def test_one_server_answers_on_every_address(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    import uvicorn

    servers: list[uvicorn.Server] = []
    original = uvicorn.Server.__init__

    def keep(self: uvicorn.Server, config: uvicorn.Config) -> None:
        original(self, config)
        servers.append(self)

    monkeypatch.setattr(uvicorn.Server, "__init__", keep)
    monkeypatch.setattr(serving, "settle_garbage_collector", lambda: None)  # no gc.freeze in tests
    app = Starlette(routes=[Route("/ping", lambda request: PlainTextResponse("pong"))])
    port = _free_port()
    settings = replace(Settings(), host="127.0.0.1,::1", port=port)
    thread = threading.Thread(target=serving.serve_one, args=(app, settings), daemon=True)
    thread.start()
    try:
        for host in ("127.0.0.1", "[::1]"):
            for _ in range(200):  # until it listens (a condition, not a fixed sleep)
                try:
                    response = httpx.get(f"http://{host}:{port}/ping", timeout=5)
                    break
                except httpx.ConnectError:
                    threading.Event().wait(0.05)
            assert response.text == "pong"
    finally:
        for server in servers:
            server.should_exit = True
        thread.join(timeout=30)
