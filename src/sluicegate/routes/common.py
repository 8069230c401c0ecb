"""What the non-turn routes (models, downloads, stored responses) share: auth, counting, and
every error in the shape of the API the route belongs to. Chat routes are served by the turn
runner (`sluicegate.turn`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.observe.metrics import METRICS
from sluicegate.turn.http import JSONResponse, app_state, read_json

log = logging.getLogger(__name__)

ErrorRenderer = Callable[[ErrorInfo], dict[str, Any]]
Endpoint = Callable[[Request], Awaitable[Response]]

__all__ = ["JSONResponse", "app_state", "dialect_endpoint", "error_response", "read_json"]


def error_response(info: ErrorInfo, render: ErrorRenderer, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(render(info), status_code=info.status, headers=headers)


def dialect_endpoint(dialect: str, render: ErrorRenderer) -> Callable[[Endpoint], Endpoint]:
    """Count, and turn every error into this dialect's own shape and status (API keys are
    checked before routing: `sluicegate.app.auth`)."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        @wraps(endpoint)
        async def wrapped(request: Request) -> Response:
            try:
                response = await endpoint(request)
            except SluicegateError as exc:
                response = error_response(exc.info, render)
            except Exception:
                log.exception("unhandled error in %s %s", request.method, request.url.path)
                info = ErrorInfo(ErrorKind.INTERNAL, "The server had an error while processing your request.")
                response = error_response(info, render)
            METRICS.inc("sluicegate_requests_total", dialect=dialect, status=str(response.status_code))
            return response

        return wrapped

    return decorate
