"""What every route needs: app state, bounded JSON bodies, auth, admission and error rendering.

Routes orchestrate (parse → admit → open → stream or collect); they neither translate wire
formats (dialects do) nor frame bytes (the transport does).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from sluicegate.config import Settings
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError, invalid
from sluicegate.core.events import RawEvent
from sluicegate.core.pipeline import StreamLimits
from sluicegate.downloads import Downloads
from sluicegate.engines.registry import Model, Registry
from sluicegate.metrics import METRICS
from sluicegate.store.base import Store
from sluicegate.tools.catalog import ToolCatalog
from sluicegate.transport.answer import Opened, await_answer

if TYPE_CHECKING:
    from sluicegate.routes.responses_runs import ResponseRun

log = logging.getLogger(__name__)

INSTANCE_HEADER = "X-Sluicegate-Instance"
ErrorRenderer = Callable[[ErrorInfo], dict[str, Any]]
StatusOf = Callable[[ErrorInfo], int]  # a dialect whose statuses differ (Anthropic: 529 overloaded)


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class Admission:
    """A server-wide cap on requests in flight; above it, 429 instead of a pile-up."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def take(self) -> Callable[[], None]:
        if self.limit and self.in_flight >= self.limit:
            raise SluicegateError(
                ErrorKind.RATE_LIMITED,
                f"Too many requests in flight ({self.in_flight}, max_concurrent_requests); retry shortly.",
                code="rate_limit_exceeded",
            )
        self.in_flight += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1

        return release


@dataclass(slots=True)
class AppState:
    settings: Settings
    registry: Registry
    limits: StreamLimits
    admission: Admission
    store: Store
    downloads: Downloads
    runs: dict[str, ResponseRun] = field(default_factory=dict)  # Responses generations in flight
    tools: ToolCatalog = field(default_factory=ToolCatalog)  # server-side tools: MCP servers, plugins


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.sluicegate
    return state


async def read_json(request: Request, max_bytes: int) -> Any:
    """The body as JSON, refusing oversize bodies before reading them whole."""
    declared = request.headers.get("content-length")
    too_large = SluicegateError(
        ErrorKind.PAYLOAD_TOO_LARGE,
        f"Request body is larger than the limit of {max_bytes} bytes (max_body_bytes).",
        code="request_too_large",
    )
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise invalid("The request body is empty; expected a JSON object.")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(
            f"We could not parse the JSON body of your request ({exc.msg} at position {exc.pos}). "
            "Send valid JSON with Content-Type: application/json."
        ) from exc


def check_auth(request: Request, api_keys: list[str]) -> None:
    if not api_keys:
        return
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    if token not in api_keys:
        message = (
            "Incorrect API key provided." if token else "Missing API key: send 'Authorization: Bearer <key>'."
        )
        raise SluicegateError(ErrorKind.AUTHENTICATION, message, code="invalid_api_key")


def error_response(
    info: ErrorInfo,
    render: ErrorRenderer,
    headers: dict[str, str] | None = None,
    status: StatusOf | None = None,
) -> Response:
    return JSONResponse(render(info), status_code=status(info) if status else info.status, headers=headers)


Endpoint = Callable[[Request], Awaitable[Response]]


def dialect_endpoint(
    dialect: str, render: ErrorRenderer, status: StatusOf | None = None
) -> Callable[[Endpoint], Endpoint]:
    """Authenticate, count, and turn every error into this dialect's own shape and status."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        @wraps(endpoint)
        async def wrapped(request: Request) -> Response:
            try:
                check_auth(request, app_state(request).settings.api_keys)
                response = await endpoint(request)
            except SluicegateError as exc:
                response = error_response(exc.info, render, status=status)
            except Exception:
                log.exception("unhandled error in %s %s", request.method, request.url.path)
                info = ErrorInfo(ErrorKind.INTERNAL, "The server had an error while processing your request.")
                response = error_response(info, render, status=status)
            METRICS.inc("sluicegate_requests_total", dialect=dialect, status=str(response.status_code))
            return response

        return wrapped

    return decorate


async def wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


ANSWER_WAIT_SECONDS = 15.0  # when heartbeats are off: how long a stream waits for an upstream


async def engine_answer(
    request: Request, model: Model, events: AsyncIterator[RawEvent], limits: StreamLimits, *, stream: bool
) -> Opened:
    """For engines that reach an upstream, wait for it to accept the request before answering
    (see `transport/answer.py`): a stream waits at most one heartbeat interval, a non-streaming
    request as long as it takes (nothing is sent before the end anyway)."""
    if not type(model.engine).answers_first:
        return Opened(events)
    bound = (limits.heartbeat_seconds or ANSWER_WAIT_SECONDS) if stream else None
    return await await_answer(events, bound=bound, disconnected=lambda: wait_for_disconnect(request))
