"""A WebSocket text message that is not UTF-8 (issue 47): closed with 1007 and one log line, no
traceback, whichever of uvicorn's implementations serves it. Out of the box websockets-sansio
logged a traceback per message, wsproto sent no close frame, legacy websockets logged nothing.
Each runs in a real uvicorn server on a thread, driven by a real client."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect

from sluicegate.app.websocket_protocol import websocket_protocol

LIMIT = 30.0  # bounds a hang only


async def echo(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] != "websocket.disconnect":
        await send({"type": "websocket.send", "text": message.get("text") or ""})


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger()
    level, root.level = root.level, logging.INFO
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    root.level = level


@pytest.mark.parametrize("implementation", ["websockets-sansio", "wsproto", "websockets"])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_invalid_utf8_text_closes_1007_with_one_log_line(implementation: str, records: Records) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(
        echo, port=port, ws=websocket_protocol(implementation), log_config=None, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + LIMIT
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        with connect(f"ws://127.0.0.1:{port}/", open_timeout=LIMIT) as client:
            client.send("fine")
            assert client.recv(timeout=LIMIT) == "fine"
            before = len(records.records)
            client.send(b"\xff\xfe not UTF-8", text=True)
            with pytest.raises(ConnectionClosedError) as closed:
                client.recv(timeout=LIMIT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
        logged = records.records[before:]
        assert not [r.getMessage() for r in logged if r.exc_info is not None]  # no traceback
        said = [r.getMessage() for r in logged if r.levelno >= logging.WARNING]
        assert len(said) == 1 and "not UTF-8" in said[0], (
            said
        )  # (legacy also says "connection closed", as always)
        with connect(f"ws://127.0.0.1:{port}/", open_timeout=LIMIT) as client:  # the server serves on
            client.send("again")
            assert client.recv(timeout=LIMIT) == "again"
    finally:
        server.should_exit = True
        thread.join(LIMIT)
