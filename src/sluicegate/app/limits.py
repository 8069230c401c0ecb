"""A runtime key's limits, enforced where its key is checked (`app/auth.py`), before routing:
one place for every route of every dialect.

Over a limit the answer is a 429 in the dialect's own error shape (OpenAI's
`rate_limit_exceeded`, Anthropic's `rate_limit_error`, Ollama's and LM Studio's), with
`Retry-After`; every answer to a limited key carries OpenAI's `x-ratelimit-*` headers. When
the request ends, its place in flight is given back and the tokens its engine reported (the
request's observer) are counted against the key's minute.

When the counters cannot be reached (Redis down), `[server] limits_on_store_failure` says
what happens: "open" lets the request through uncounted, "closed" answers 503 in the
dialect's shape. Never a 500.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.dialects.registry import dialect_for
from sluicegate.observe.metrics import METRICS
from sluicegate.observe.requests import current
from sluicegate.store.keys import KeyLimits, KeyRecord
from sluicegate.store.limits import Limiter, Refused, Taken

log = logging.getLogger(__name__)

OnFailure = Literal["open", "closed"]


def reset_text(seconds: float) -> str:
    """OpenAI's reset format: `1s`, `6m0s`, `0.5s`."""
    seconds = max(seconds, 0.0)
    if seconds >= 60:
        minutes, rest = divmod(math.ceil(seconds), 60)
        return f"{minutes}m{rest}s"
    return f"{round(seconds, 3):g}s"


def rate_headers(limits: KeyLimits, taken: Taken) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    reset = reset_text(taken.reset_seconds).encode()
    if limits.rpm is not None and taken.requests_left is not None:
        headers += [
            (b"x-ratelimit-limit-requests", str(limits.rpm).encode()),
            (b"x-ratelimit-remaining-requests", str(max(taken.requests_left, 0)).encode()),
            (b"x-ratelimit-reset-requests", reset),
        ]
    if limits.tpm is not None and taken.tokens_left is not None:
        headers += [
            (b"x-ratelimit-limit-tokens", str(limits.tpm).encode()),
            (b"x-ratelimit-remaining-tokens", str(max(taken.tokens_left, 0)).encode()),
            (b"x-ratelimit-reset-tokens", reset),
        ]
    return headers


async def answer_error(scope: Scope, send: Send, info: ErrorInfo, headers: list[tuple[bytes, bytes]]) -> None:
    """An error before routing, in the shape and status of the API the path belongs to."""
    spec = dialect_for(scope["path"])
    status = spec.status(info)
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1013, "reason": info.message[:120]})
        return
    body = orjson.dumps(spec.body(info, status))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def used_tokens() -> int:
    """The tokens the request's engine reported (input and output), from its observer."""
    observer = current()
    if observer is None:
        return 0
    out = observer.completion_tokens if observer.completion_tokens is not None else observer.tokens
    return (observer.prompt_tokens or 0) + out


async def serve_limited(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    record: KeyRecord,
    limiter: Limiter,
    on_failure: OnFailure,
) -> None:
    limits = record.limits
    try:
        taken = await limiter.take(record.name, limits)
    except SluicegateError as exc:  # the counters cannot be reached
        METRICS.inc("sluicegate_rate_limit_store_failures_total")
        if on_failure == "closed":
            await answer_error(scope, send, exc.info, [(b"retry-after", b"1")])
            return
        log.warning("rate limits not counted for key %r: %s", record.name, exc)
        await app(scope, receive, send)
        return
    if isinstance(taken, Refused):
        METRICS.inc("sluicegate_rate_limited_total", reason=taken.reason)
        info = ErrorInfo(ErrorKind.RATE_LIMITED, taken.message, code="rate_limit_exceeded")
        retry = str(max(1, math.ceil(taken.retry_after))).encode()
        await answer_error(scope, send, info, [(b"retry-after", retry)])
        return
    extra = rate_headers(limits, taken)

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    try:
        await app(scope, receive, send_with_headers if extra else send)
    finally:
        try:
            await limiter.give_back(record.name, limits, taken, used_tokens())
        except SluicegateError as exc:
            log.warning("giving back a rate-limit place failed for key %r: %s", record.name, exc)
