"""uvicorn's WebSocket protocols, refusing a text message that is not UTF-8 the same way in each:
close code 1007 (invalid frame payload data) and one log line, no traceback (issue 47).

Out of the box uvicorn's three implementations disagreed: websockets-sansio (its choice when
`websockets` is installed) logged a traceback for each such message, which a hostile client can
fill the log with; wsproto closed the TCP connection without a close frame; the legacy
`websockets` one closed with 1007 and said nothing. Each is subclassed here at the one place it
meets the bad text; `websocket_protocol()` makes uvicorn's own choice among them. uvicorn's
default (websockets-sansio) is imported with the first WebSocket a client opens: `websockets`
is ~1.4 MiB of every server's RSS, and most servers never see a WebSocket.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
INVALID_DATA = 1007


def _refused(client: tuple[str, int] | None) -> None:
    peer = f"{client[0]}:{client[1]}" if client else "a client"
    log.warning("closed the WebSocket of %s with %d: a text message that is not UTF-8", peer, INVALID_DATA)


@functools.cache
def _sansio() -> type[asyncio.Protocol]:
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class SansIOProtocol(WebSocketsSansIOProtocol):
        def send_receive_event_to_app(self) -> None:
            # uvicorn decodes the text itself, and logs its UnicodeDecodeError with a traceback.
            if self.curr_msg_data_type == "text" and not self.close_sent:
                try:
                    b"".join(self.frames).decode()
                except UnicodeDecodeError:
                    self.frames = []
                    _refused(self.client)
                    self.conn.send_close(INVALID_DATA, "invalid UTF-8")
                    self.handle_parser_exception()  # tells the app, sends the close, ends the connection
                    return
            super().send_receive_event_to_app()

    return SansIOProtocol


def sansio_protocol(*args: Any, **kwargs: Any) -> asyncio.Protocol:
    """uvicorn's `ws_protocol_class` for websockets-sansio: uvicorn calls it for each WebSocket
    upgrade, and only then is the implementation imported (a module-level function, so that
    worker processes can unpickle uvicorn's settings)."""
    return _sansio()(*args, **kwargs)


@functools.cache
def _legacy() -> type[asyncio.Protocol]:
    with warnings.catch_warnings():  # websockets.legacy is deprecated; uvicorn still offers it
        warnings.simplefilter("ignore", DeprecationWarning)
        from uvicorn.protocols.websockets.websockets_impl import WebSocketProtocol

    class LegacyProtocol(WebSocketProtocol):
        def fail_connection(self, code: int = 1006, reason: str = "") -> None:
            if code == INVALID_DATA:  # websockets decodes the text, closes with 1007, logs nothing
                _refused(self.client)
            super().fail_connection(code, reason)

    return LegacyProtocol


@functools.cache
def _wsproto() -> type[asyncio.Protocol] | None:
    try:
        from uvicorn.protocols.websockets.wsproto_impl import WSProtocol
        from wsproto.connection import ConnectionState
        from wsproto.events import CloseConnection
    except ImportError:  # wsproto is optional, as for uvicorn
        return None

    class WSProtoProtocol(WSProtocol):
        def handle_close(self, event: Any) -> None:
            if not self.close_sent and self.conn.state is ConnectionState.OPEN:
                # wsproto's own verdict on a frame it refused (invalid UTF-8 among them): no close
                # came from the peer, so uvicorn sent none back. Ours says why.
                if event.code == INVALID_DATA:
                    _refused(self.client)
                self.transport.write(self.conn.send(CloseConnection(code=event.code, reason=event.reason)))
                self.queue.put_nowait(
                    {"type": "websocket.disconnect", "code": event.code, "reason": event.reason}
                )
                self.transport.close()
                return
            super().handle_close(event)

    return WSProtoProtocol


def websocket_protocol(implementation: str = "auto") -> Callable[..., asyncio.Protocol]:
    """What makes the protocol of uvicorn's implementation of that name (its `ws` setting),
    refusing invalid UTF-8 as above. "auto" is uvicorn's own choice, websockets-sansio
    (`websockets` is a dependency of ours), made by `sansio_protocol`."""
    if implementation in ("auto", "websockets-sansio"):
        return sansio_protocol
    found = (
        _legacy() if implementation == "websockets" else _wsproto() if implementation == "wsproto" else None
    )
    if found is None:
        raise ValueError(f"no WebSocket implementation {implementation!r} here")
    return found
