"""What an upstream's refusals and failures become in the canonical error model.

The client talks to Sluicegate, not to the upstream: a request the upstream finds invalid is
the client's mistake (400 with the upstream's words), but credentials the upstream refuses are
ours (502, never the client's 401), and an upstream that fails is a bad gateway (502).
"""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.errors import ErrorInfo, ErrorKind

MAX_ERROR_BODY = 4096  # of a non-2xx body, enough for any error message


def kind_for_status(status: int) -> tuple[ErrorKind, str | None]:
    """Our kind (hence our status) and default code for an upstream HTTP status."""
    if status in (401, 403):
        return ErrorKind.UPSTREAM, "upstream_auth_failed"
    if status == 404:
        return ErrorKind.NOT_FOUND, "model_not_found"
    if status == 408:
        return ErrorKind.TIMEOUT, "upstream_timeout"
    if status == 413:
        return ErrorKind.PAYLOAD_TOO_LARGE, None
    if status == 429:
        return ErrorKind.RATE_LIMITED, "rate_limit_exceeded"
    if 400 <= status < 500:
        return ErrorKind.INVALID_REQUEST, None
    if status == 529:  # Anthropic's "overloaded"
        return ErrorKind.OVERLOADED, "upstream_overloaded"
    return ErrorKind.UPSTREAM, "upstream_error"


def _fields(payload: Any) -> tuple[str | None, str | None, str | None, Any]:
    """(message, type, param, code) from the shapes upstreams use: OpenAI's `{"error": {...}}`,
    vLLM's older top-level `{"object": "error", "message": ...}`, or `{"error": "text"}`."""
    if not isinstance(payload, dict):
        return None, None, None, None
    inner = payload.get("error", payload)
    if isinstance(inner, str):
        return inner, None, None, None
    if not isinstance(inner, dict):
        return None, None, None, None
    message = inner.get("message") or inner.get("detail")
    return (
        message if isinstance(message, str) else None,
        inner.get("type") if isinstance(inner.get("type"), str) else None,
        inner.get("param") if isinstance(inner.get("param"), str) else None,
        inner.get("code"),
    )


def http_error(status: int, body: bytes, replica: str, model_id: str) -> ErrorInfo:
    """A non-2xx answer (JSON or plain text) as the error our client sees."""
    try:
        message, _type, param, code = _fields(orjson.loads(body))
    except orjson.JSONDecodeError:
        message, param, code = None, None, None
    if message is None:
        text = body[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
        message = text or "(empty body)"
    kind, default_code = kind_for_status(status)
    if kind is ErrorKind.UPSTREAM and default_code == "upstream_auth_failed":
        message = (
            f"The upstream {replica} refused Sluicegate's credentials for model {model_id!r} "
            f"(HTTP {status}): {message}"
        )
    elif kind is ErrorKind.UPSTREAM:
        message = f"The upstream {replica} failed (HTTP {status}): {message}"
    if kind is not ErrorKind.NOT_FOUND:
        param = param if kind is ErrorKind.INVALID_REQUEST else None
    else:
        param = "model"
    return ErrorInfo(kind, message, param=param, code=code if isinstance(code, str) else default_code)


def stream_error(payload: Any) -> ErrorInfo:
    """A mid-stream error frame (`data: {"error": ...}` or `event: error`)."""
    message, error_type, _param, code = _fields(payload)
    if isinstance(code, int) and 400 <= code < 600:
        kind, default_code = kind_for_status(code)
    elif error_type in ("invalid_request_error", "BadRequestError"):
        kind, default_code = ErrorKind.INVALID_REQUEST, None
    else:
        kind, default_code = ErrorKind.UPSTREAM, "upstream_error"
    return ErrorInfo(
        kind,
        f"The upstream reported an error: {message or 'An error occurred during streaming'}",
        code=code if isinstance(code, str) else default_code,
    )
