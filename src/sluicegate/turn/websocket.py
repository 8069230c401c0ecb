"""The Responses API over a WebSocket (`ws://…/v1/responses`), as the Open Responses spec says.

A connection is a sequence of turns. The API key is checked on the handshake before routing
(`app/auth.py`: a refused handshake is closed with 1008, an HTTP 403). Each
turn is a `response.create` message — the create body without the HTTP-only `stream`,
`stream_options` and `background` — run by the one turn runner (`TurnEndpoint.prepare`, the
same pipeline as `POST /v1/responses`) and streamed as one text message per event, with the
same event objects and sequence numbers as the SSE stream (`transport/websocket.py`). A turn
ends with its terminal `response.*` event, or with an `error` envelope
`{"type": "error", "status", "error": {"type", "code", "message", "param"}}` when it cannot
start (bad JSON, validation, an unknown `previous_response_id`); the connection stays open.

- One response in flight per connection: messages that arrive during a turn wait and run after
  it, in order. At most `PENDING_MESSAGES` wait: the socket is always read (that is how a
  disconnect is seen at once), so a client that piles up more is closed (1008), not buffered.
- Connection-local state: every turn's conversation is remembered for the connection
  (`conversation/local.py`, the most recent few), so `previous_response_id` continues a
  `store: false` response without it being written anywhere. An id this connection does not
  hold (and the store does not) is `previous_response_not_found` (400); with `store: false` a
  tool result answering no known call is a 400, never a synthesised call. A continuation that
  fails evicts the response it continued, so retrying it is `previous_response_not_found`.
- The connection ends after `websocket_max_seconds` (60 minutes): a turn in flight finishes,
  then the `websocket_connection_limit_reached` envelope is sent and the socket closed.
- A client that disconnects cancels its turn in flight: the runner's owner (`core.owned`) releases the
  admission place, tools and generation as for an SSE client that leaves.
- Each turn is observed like an HTTP request (`observe/requests.py`): its metrics and one access line,
  method `WS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from sluicegate.conversation.local import ConnectionResponses
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError, invalid
from sluicegate.core.ids import new_id
from sluicegate.core.owned import Owned
from sluicegate.core.scope import issued_key
from sluicegate.dialects.base import Turn
from sluicegate.observe import tracing
from sluicegate.observe.metrics import METRICS
from sluicegate.observe.requests import RequestObserver, observing
from sluicegate.transport.websocket import stream_websocket
from sluicegate.turn.http import app_state, parse_json, request_scope
from sluicegate.turn.runner import TurnEndpoint, TurnSource
from sluicegate.turn.state import AppState

log = logging.getLogger(__name__)
Json = dict[str, Any]

CREATE = "response.create"
HTTP_ONLY = ("stream", "stream_options")  # dropped: a WebSocket turn always streams
PENDING_MESSAGES = 16  # messages waiting for the turn in flight; one more closes the connection
LIMIT_CODE = "websocket_connection_limit_reached"
POLICY_VIOLATION = 1008  # the close code for a client that breaks the protocol


def error_envelope(status: int, body: Json) -> str:
    """The spec's WebSocket `error` envelope around a dialect error body `{"error": {...}}`;
    `error.code` is always a string (the error type when the error has no code of its own)."""
    error = dict(body.get("error") or {})
    error["code"] = error.get("code") or error.get("type") or "error"
    return orjson.dumps({"type": "error", "status": status, "error": error}).decode()


def previous_not_found(response_id: str) -> SluicegateError:
    return invalid(
        f"Previous response with id '{response_id}' not found.",
        "previous_response_id",
        code="previous_response_not_found",
    )


class ResponsesSocket:
    """The ASGI endpoint of `WebSocketRoute("/v1/responses")`: serves turns through `runner`."""

    def __init__(self, runner: TurnEndpoint) -> None:
        self.runner = runner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)  # the API key was checked before routing
        state = app_state(websocket)
        await websocket.accept()
        await _Connection(self.runner, state, websocket).run()


class _Connection:
    """One accepted WebSocket: its reader, its turns one at a time, its local state."""

    def __init__(self, runner: TurnEndpoint, state: AppState, websocket: WebSocket) -> None:
        self.runner = runner
        self.dialect = runner.dialect
        self.state = state
        self.websocket = websocket
        self.local = ConnectionResponses(state.settings.responses_websocket_cached_responses)
        self.scope = request_scope(websocket, state.settings.api_keys)
        self.inbox: asyncio.Queue[str | bytes] = asyncio.Queue(PENDING_MESSAGES)
        self.closing: tuple[int, str] | None = None  # why the server closes the connection
        self.gone = asyncio.Event()  # the client disconnected

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.state.settings.responses_websocket_max_seconds
        reader = loop.create_task(self._read())
        try:
            while not self.gone.is_set():
                message = await self._next(deadline - loop.time())
                if message is None:
                    if not self.gone.is_set():
                        await self._limit_reached()
                    return
                await self._turn(message)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if self.closing is not None:
                with contextlib.suppress(OSError, WebSocketDisconnect, RuntimeError):
                    await self.websocket.close(*self.closing)

    async def _next(self, remaining: float) -> str | bytes | None:
        """The next message; None when the client left or the connection's time is up."""
        if remaining <= 0:
            return None
        getter = asyncio.ensure_future(self.inbox.get())
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait({getter, gone}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not getter.done():
                getter.cancel()
            await asyncio.gather(getter, gone, return_exceptions=True)
        if getter.done() and not getter.cancelled():
            return getter.result()
        return None

    async def _read(self) -> None:
        """Read the socket for the whole connection: messages into the inbox, a disconnect
        into `gone` (which cancels a turn in flight)."""
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                # A binary message is parsed as it came: invalid UTF-8 is a 400, not replaced.
                text = message.get("text")
                data: str | bytes = text if text is not None else message.get("bytes") or b""
                try:
                    self.inbox.put_nowait(data)
                except asyncio.QueueFull:
                    reason = (
                        f"more than {PENDING_MESSAGES} response.create messages waiting; send one at a time"
                    )
                    self.closing = (POLICY_VIOLATION, reason)
                    return
        except (OSError, WebSocketDisconnect, RuntimeError):
            return
        finally:
            self.gone.set()  # cancels the turn in flight

    async def _send(self, text: str) -> None:
        with contextlib.suppress(OSError, WebSocketDisconnect, RuntimeError):
            await self.websocket.send_text(text)

    async def _send_error(self, info: ErrorInfo) -> int:
        status = self.dialect.status(info)
        await self._send(error_envelope(status, self.dialect.error(info)))
        return status

    async def _limit_reached(self) -> None:
        seconds = self.state.settings.responses_websocket_max_seconds
        info = ErrorInfo(
            ErrorKind.INVALID_REQUEST,
            f"The WebSocket connection reached its {seconds:g}-second limit; open a new connection.",
            code=LIMIT_CODE,
        )
        await self._send_error(info)
        with contextlib.suppress(OSError, WebSocketDisconnect, RuntimeError):
            await self.websocket.close(1000, LIMIT_CODE)

    async def _turn(self, text: str | bytes) -> None:
        status = 500
        path = self.websocket.scope["path"]
        observer = RequestObserver(self.dialect.name, "WS", path, new_id("req_", 16))
        if tracing.enabled():
            observer.start_span([])
        try:
            with observing(observer):
                status = await self._observed_turn(text)
        finally:
            observer.end(status)

    async def _observed_turn(self, text: str | bytes) -> int:
        status = 500
        previous: str | None = None
        try:
            body = self._create_body(text)
            previous = (
                body.get("previous_response_id")
                if isinstance(body.get("previous_response_id"), str)
                else None
            )
            status = await self._run(body)
        except SluicegateError as exc:
            status = await self._send_error(exc.info)
        except Exception:  # a bug: the turn ends with an error envelope, the connection goes on
            log.exception("unhandled error in a WebSocket turn")
            info = ErrorInfo(ErrorKind.INTERNAL, "The server had an error while processing your request.")
            status = await self._send_error(info)
        finally:
            if status >= 400 and previous is not None:
                self.local.evict(previous)  # the spec: a failed continuation evicts what it continued
            METRICS.inc("sluicegate_requests_total", dialect=self.dialect.name, status=str(status))
        return status

    def _create_body(self, text: str | bytes) -> Json:
        """A `response.create` message → the create body the dialect parses (streaming). The
        message gets every check an HTTP body gets (`parse_json`)."""
        settings = self.state.settings
        limit = settings.max_body_bytes
        if len(text) > limit or (isinstance(text, str) and len(text.encode()) > limit):
            raise SluicegateError(
                ErrorKind.PAYLOAD_TOO_LARGE,
                f"Message is larger than the limit of {limit} bytes (max_body_bytes).",
                code="request_too_large",
            )
        hint = f"Send a JSON object with type '{CREATE}'."
        message = parse_json(text, settings.max_json_depth, what="message", hint=hint)
        if not isinstance(message, dict):
            raise invalid(f"A message must be a JSON object with type '{CREATE}'.")
        if message.get("type") != CREATE:
            raise invalid(f"Unsupported message type {message.get('type')!r}; expected '{CREATE}'.", "type")
        if message.get("background") not in (None, False):
            raise invalid("background is not supported over WebSocket; use POST /v1/responses.", "background")
        body = {k: v for k, v in message.items() if k not in ("type", "background", *HTTP_ONLY)}
        body["stream"] = True
        return body

    def _adapt(self, turn: Turn) -> None:
        """Continuation reads this connection's turns first; `store: false` has no other state."""
        conv = turn.conversation
        if conv is not None:
            conv.local = self.local.conversation
            conv.previous_not_found = previous_not_found
            conv.strict_calls = not turn.store

    async def _run(self, body: Json) -> int:
        """One turn through the runner; its status (200 once it streamed)."""
        runner, state = self.runner, self.state
        async with Owned() as owned:
            source = TurnSource(
                body,
                self.websocket.query_params,
                self.websocket.headers,
                self.scope,
                self.gone.wait,
                adapt=self._adapt,
                remember=self.local.remember,
                key=issued_key(self.websocket.scope),
            )
            prepared = await runner.prepare(state, source, owned)
            pipeline = prepared.pipeline
            with runner.live(state, prepared):
                outcome = await stream_websocket(pipeline.frames(), self.websocket.send_text, self.gone)
                await pipeline.abandon("client_disconnected")  # a no-op when it ended
            if outcome.client_gone:
                return 499
            error = pipeline.accumulator.result.error
            return self.dialect.status(error) if error is not None else 200
