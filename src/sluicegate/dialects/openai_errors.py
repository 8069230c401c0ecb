"""The OpenAI error shape `{"error": {"message", "type", "param", "code"}}`, shared by the
Chat Completions and Responses dialects."""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import ErrorInfo, ErrorKind

# (type, default code) per canonical kind; mid-stream types follow the streaming reference.
OPENAI_ERROR_TYPE: dict[ErrorKind, tuple[str | None, str | None]] = {
    ErrorKind.INVALID_REQUEST: ("invalid_request_error", None),
    ErrorKind.AUTHENTICATION: ("authentication_error", "invalid_api_key"),
    ErrorKind.NOT_FOUND: ("invalid_request_error", "not_found"),
    ErrorKind.PAYLOAD_TOO_LARGE: ("invalid_request_error", "request_too_large"),
    ErrorKind.RATE_LIMITED: ("rate_limit_error", "rate_limit_exceeded"),
    ErrorKind.OVERLOADED: ("server_error", "server_overloaded"),
    ErrorKind.NOT_IMPLEMENTED: ("invalid_request_error", "not_implemented"),
    ErrorKind.TIMEOUT: ("timeout_error", "timeout"),
    ErrorKind.IDLE_TIMEOUT: ("stream_idle_timeout", "stream_idle_timeout"),
    ErrorKind.ENGINE: ("api_error", "engine_error"),
    ErrorKind.UPSTREAM: ("api_error", "upstream_error"),
    ErrorKind.CANCELLED: (None, "cancelled"),
    ErrorKind.INTERNAL: ("api_error", "internal_error"),
}


def openai_error(info: ErrorInfo) -> dict[str, Any]:
    error_type, default_code = OPENAI_ERROR_TYPE[info.kind]
    return {
        "error": {
            "message": info.message,
            "type": error_type,
            "param": info.param,
            "code": info.code or default_code,
        }
    }
