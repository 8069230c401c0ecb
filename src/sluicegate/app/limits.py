"""A runtime key's budget and limits, enforced where its key is checked (`app/auth.py`), before
routing: one place for every route of every dialect; and its usage, counted when it ends.

Over a limit the answer is a 429 in the dialect's own error shape (OpenAI's
`rate_limit_exceeded`, Anthropic's `rate_limit_error`, Ollama's and LM Studio's), with
`Retry-After`; every answer to a limited key carries OpenAI's `x-ratelimit-*` headers. When
the request ends, its place in flight is given back and what its engine reported (the
request's observer) is counted: against the key's minute, and in its usage (`store/usage.py`)
per model and day, priced by `[prices]`. A key whose budget (`store/keys.py` `KeyBudget`) is
spent gets a 429 `insufficient_quota` until its period ends.

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
from sluicegate.store.usage import Price, UsageStore, Used, budget_state, price_of, today

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


def used() -> tuple[Used, str]:
    """What the request's engine reported (input, cached, output, reasoning) and for which
    model, from its observer."""
    observer = current()
    if observer is None:
        return Used(requests=1), ""
    out = observer.completion_tokens if observer.completion_tokens is not None else observer.tokens
    return Used(
        requests=1,
        input_tokens=observer.prompt_tokens or 0,
        cached_tokens=observer.cached_tokens,
        output_tokens=out,
        reasoning_tokens=observer.reasoning_tokens,
    ), observer.model


class KeyAccounting:
    """Everything a runtime key's request is counted by: its budget and limits before it runs,
    its usage (and the tokens its limits count) when it ends."""

    def __init__(
        self, limiter: Limiter, usage: UsageStore, prices: dict[str, Price], on_failure: OnFailure = "open"
    ) -> None:
        self.limiter = limiter
        self.usage = usage
        self.prices = prices
        self.on_failure: OnFailure = on_failure

    async def _over_budget(self, record: KeyRecord) -> ErrorInfo | None:
        budget = record.budget
        if budget is None or (budget.tokens is None and budget.cost is None):
            return None
        if not (await budget_state(self.usage, record.name, budget)).exhausted:
            return None
        return ErrorInfo(
            ErrorKind.RATE_LIMITED,
            f"This API key has used its {budget.period}ly budget; GET /admin/usage shows what it spent.",
            code="insufficient_quota",
        )

    async def serve(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, record: KeyRecord
    ) -> None:
        limits = record.limits
        taken: Taken | None = None
        try:
            refusal = await self._over_budget(record)
            if refusal is not None:
                METRICS.inc("sluicegate_rate_limited_total", reason="budget")
                await answer_error(scope, send, refusal, [(b"retry-after", b"3600")])
                return
            if limits.any:
                answer = await self.limiter.take(record.name, limits)
                if isinstance(answer, Refused):
                    METRICS.inc("sluicegate_rate_limited_total", reason=answer.reason)
                    info = ErrorInfo(ErrorKind.RATE_LIMITED, answer.message, code="rate_limit_exceeded")
                    retry = str(max(1, math.ceil(answer.retry_after))).encode()
                    await answer_error(scope, send, info, [(b"retry-after", retry)])
                    return
                taken = answer
        except SluicegateError as exc:  # the counters cannot be reached
            METRICS.inc("sluicegate_rate_limit_store_failures_total")
            if self.on_failure == "closed":
                await answer_error(scope, send, exc.info, [(b"retry-after", b"1")])
                return
            log.warning("limits not checked for key %r: %s", record.name, exc)
        extra = rate_headers(limits, taken) if taken is not None else []

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        try:
            await app(scope, receive, send_with_headers if extra else send)
        finally:
            await self._count(record, taken)

    async def _count(self, record: KeyRecord, taken: Taken | None) -> None:
        spent, model = used()
        price = price_of(self.prices, model) if model else None
        if price is not None:
            spent.cost = price.cost(spent)
        METRICS.inc("sluicegate_key_requests_total", key=record.name)
        if spent.tokens:
            METRICS.inc("sluicegate_key_tokens_total", spent.input_tokens, key=record.name, kind="input")
            METRICS.inc("sluicegate_key_tokens_total", spent.output_tokens, key=record.name, kind="output")
        try:
            if taken is not None:
                await self.limiter.give_back(record.name, record.limits, taken, spent.tokens)
            await self.usage.add(today(), record.name, model or "", spent)
        except SluicegateError as exc:
            log.warning("counting the use of key %r failed: %s", record.name, exc)
