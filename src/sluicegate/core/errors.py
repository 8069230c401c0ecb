"""Errors as data: one canonical shape that every dialect renders in its own way.

Engines and parsers raise `SluicegateError` before a stream starts (the dialect turns it into an
HTTP status and body) and emit `Failed` events once it has started (the dialect turns it into
its terminal error frames). Neither ever carries a stack trace to the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorKind(StrEnum):
    INVALID_REQUEST = "invalid_request"
    AUTHENTICATION = "authentication"
    NOT_FOUND = "not_found"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    NOT_IMPLEMENTED = "not_implemented"
    TIMEOUT = "timeout"  # the whole-request deadline passed
    IDLE_TIMEOUT = "idle_timeout"  # the engine went silent for too long
    ENGINE = "engine"  # the engine failed while generating
    UPSTREAM = "upstream"  # an upstream server (gateway mode) failed or refused our credentials
    CANCELLED = "cancelled"  # the server (not the client) cancelled the request
    INTERNAL = "internal"


HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_REQUEST: 400,
    ErrorKind.AUTHENTICATION: 401,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.PAYLOAD_TOO_LARGE: 413,
    ErrorKind.RATE_LIMITED: 429,
    ErrorKind.OVERLOADED: 503,
    ErrorKind.NOT_IMPLEMENTED: 501,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.IDLE_TIMEOUT: 504,
    ErrorKind.ENGINE: 500,
    ErrorKind.UPSTREAM: 502,
    ErrorKind.CANCELLED: 499,
    ErrorKind.INTERNAL: 500,
}


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    kind: ErrorKind
    message: str
    param: str | None = None
    code: str | None = None  # a more specific machine-readable code, e.g. "model_not_found"
    # Numbers a dialect's shape may carry beside the message (llama-server's `n_prompt_tokens`
    # and `n_ctx` for a prompt too long for the context).
    details: dict[str, int] | None = None

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.kind]


class SluicegateError(Exception):
    """An error with a place in the canonical error model; raised before a stream starts."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        details: dict[str, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.info = ErrorInfo(kind, message, param, code, details)


def invalid(
    message: str, param: str | None = None, code: str | None = None, details: dict[str, int] | None = None
) -> SluicegateError:
    return SluicegateError(ErrorKind.INVALID_REQUEST, message, param=param, code=code, details=details)


class ConfigError(Exception):
    """A configuration problem, reported at startup with the offending key."""


class EngineFailure(Exception):
    """Raised by an engine mid-generation; the core turns it into a `Failed` event."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
