"""llama-server's error shape: `{"error": {"code": <HTTP status>, "message", "type"}}` with its
type names (`tools/server/server-common.cpp`). Shared, like `openai_errors.py`: llama-server's own
API (`dialects/llamaserver`, `/infill` included) and the app's answers outside a dialect (`app/`)."""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import ErrorInfo, ErrorKind

CONTEXT_EXCEEDED = "context_length_exceeded"  # the canonical code (OpenAI's name)
EXCEED_TYPE = "exceed_context_size_error"  # llama-server's type for it
_TYPES = {
    ErrorKind.INVALID_REQUEST: "invalid_request_error",
    ErrorKind.PAYLOAD_TOO_LARGE: "invalid_request_error",
    ErrorKind.AUTHENTICATION: "authentication_error",
    ErrorKind.NOT_FOUND: "not_found_error",
    ErrorKind.NOT_IMPLEMENTED: "not_supported_error",
    ErrorKind.OVERLOADED: "unavailable_error",
    ErrorKind.RATE_LIMITED: "unavailable_error",
}


def llama_server_error(info: ErrorInfo, status: int | None = None) -> dict[str, Any]:
    """`status`: the HTTP status when it is not the kind's own (a 405 from the router)."""
    code = info.status if status is None else status
    if info.code == CONTEXT_EXCEEDED:  # with the two numbers, as llama-server sends them
        return {"error": {"code": code, "message": info.message, "type": EXCEED_TYPE, **(info.details or {})}}
    return {"error": {"code": code, "message": info.message, "type": _TYPES.get(info.kind, "server_error")}}
