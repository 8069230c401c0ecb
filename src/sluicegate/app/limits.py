"""A runtime key's budget and limits, enforced where its key is checked (`app/auth.py`), before
routing: one place for every route of every dialect; and its usage, counted when it ends.

Over a limit the answer is a 429 in the dialect's own error shape (OpenAI's
`rate_limit_exceeded`, Anthropic's `rate_limit_error`, Ollama's and LM Studio's), with
`Retry-After`; every answer to a limited key carries OpenAI's `x-ratelimit-*` headers. When
the request ends, its place in flight is given back and what its engine reported (the
request's observer) is counted: against the key's minute, and in its usage (`store/usage.py`)
per model and day, priced by `[prices]`. A key whose budget (`store/keys.py` `KeyBudget`) is
spent gets a 429 `insufficient_quota` until its period ends.

A key whose `owner` names a team of the config (`[teams.NAME]`, `store/keys.py` `Team`) also
counts against the team's limits and budget, shared by all its keys: both scopes are checked
before either is counted (`Limiter.take_all`), and its use is added to the team's too.

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
from sluicegate.store.keys import KeyBudget, KeyLimits, KeyRecord, Team
from sluicegate.store.limits import Counter, Limiter, Refused, Taken
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


def rate_headers(taken: list[tuple[KeyLimits, Taken]]) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-*` headers, for the scope (the key's, its team's) with the least
    left of each limit."""
    headers: list[tuple[bytes, bytes]] = []
    requests = [
        (t.requests_left, lim.rpm, t)
        for lim, t in taken
        if lim.rpm is not None and t.requests_left is not None
    ]
    if requests:
        left, limit, t = min(requests, key=lambda x: x[0])
        headers += [
            (b"x-ratelimit-limit-requests", str(limit).encode()),
            (b"x-ratelimit-remaining-requests", str(max(left, 0)).encode()),
            (b"x-ratelimit-reset-requests", reset_text(t.reset_seconds).encode()),
        ]
    tokens = [
        (t.tokens_left, lim.tpm, t) for lim, t in taken if lim.tpm is not None and t.tokens_left is not None
    ]
    if tokens:
        left, limit, t = min(tokens, key=lambda x: x[0])
        headers += [
            (b"x-ratelimit-limit-tokens", str(limit).encode()),
            (b"x-ratelimit-remaining-tokens", str(max(left, 0)).encode()),
            (b"x-ratelimit-reset-tokens", reset_text(t.reset_seconds).encode()),
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
    """Everything a runtime key's request is counted by: its budget and limits (and its team's)
    before it runs, its usage (and the tokens its limits count) when it ends."""

    def __init__(
        self,
        limiter: Limiter,
        usage: UsageStore,
        prices: dict[str, Price],
        on_failure: OnFailure = "open",
        teams: dict[str, Team] | None = None,
    ) -> None:
        self.limiter = limiter
        self.usage = usage
        self.prices = prices
        self.on_failure: OnFailure = on_failure
        self.teams = teams or {}

    def team_of(self, record: KeyRecord) -> Team | None:
        return self.teams.get(record.owner) if record.owner else None

    async def _over_budget(self, counter: str, budget: KeyBudget | None, whose: str) -> ErrorInfo | None:
        if budget is None or (budget.tokens is None and budget.cost is None):
            return None
        if not (await budget_state(self.usage, counter, budget)).exhausted:
            return None
        return ErrorInfo(
            ErrorKind.RATE_LIMITED,
            f"{whose} has used its {budget.period}ly budget; GET /admin/usage shows what it spent.",
            code="insufficient_quota",
        )

    async def serve(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, record: KeyRecord
    ) -> None:
        team = self.team_of(record)
        scopes: list[Counter] = [(record.name, record.limits)] if record.limits.any else []
        if team is not None and team.limits.any:
            scopes.append((team.counter, team.limits))
        taken: list[tuple[Counter, Taken]] = []
        try:
            refusal = await self._over_budget(record.name, record.budget, "This API key")
            if refusal is None and team is not None:
                refusal = await self._over_budget(
                    team.counter, team.budget, f"This API key's team ({team.name})"
                )
            if refusal is not None:
                METRICS.inc("sluicegate_rate_limited_total", reason="budget")
                await answer_error(scope, send, refusal, [(b"retry-after", b"3600")])
                return
            if scopes:
                answer = await self.limiter.take_all(scopes)
                if isinstance(answer, Refused):
                    METRICS.inc("sluicegate_rate_limited_total", reason=answer.reason)
                    by_team = team is not None and scopes[answer.scope][0] == team.counter
                    whose = f"this API key's team ({team.name})" if by_team and team else "this API key"
                    info = ErrorInfo(
                        ErrorKind.RATE_LIMITED, answer.message(whose), code="rate_limit_exceeded"
                    )
                    retry = str(max(1, math.ceil(answer.retry_after))).encode()
                    await answer_error(scope, send, info, [(b"retry-after", retry)])
                    return
                taken = list(zip(scopes, answer, strict=True))
        except SluicegateError as exc:  # the counters cannot be reached
            METRICS.inc("sluicegate_rate_limit_store_failures_total")
            if self.on_failure == "closed":
                info = ErrorInfo(
                    ErrorKind.OVERLOADED,
                    "This API key's limits cannot be checked now (their store is unreachable); retry shortly.",
                    code="store_unavailable",
                )
                await answer_error(scope, send, info, [(b"retry-after", b"1")])
                return
            log.warning("limits not checked for key %r: %s", record.name, exc)
        extra = rate_headers([(limits, t) for (_name, limits), t in taken])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        try:
            await app(scope, receive, send_with_headers if extra else send)
        finally:
            await self._count(record, team, taken)

    async def _count(self, record: KeyRecord, team: Team | None, taken: list[tuple[Counter, Taken]]) -> None:
        spent, model = used()
        price = price_of(self.prices, model) if model else None
        if price is not None:
            spent.cost = price.cost(spent)
        METRICS.inc("sluicegate_key_requests_total", key=record.name)
        if spent.tokens:
            METRICS.inc("sluicegate_key_tokens_total", spent.input_tokens, key=record.name, kind="input")
            METRICS.inc("sluicegate_key_tokens_total", spent.output_tokens, key=record.name, kind="output")
        try:
            for (name, limits), t in taken:
                await self.limiter.give_back(name, limits, t, spent.tokens)
            await self.usage.add(today(), record.name, model or "", spent)
            if team is not None:  # the team's own row: its budget is read from one counter
                await self.usage.add(today(), team.counter, model or "", spent)
        except SluicegateError as exc:
            log.warning("counting the use of key %r failed: %s", record.name, exc)
