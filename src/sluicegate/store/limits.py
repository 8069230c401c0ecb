"""Counting what a runtime key uses against its limits (`store/keys.py` `KeyLimits`): requests
per minute, tokens per minute, requests in flight.

A minute is a window that opens with the key's first request in it and lasts 60 s (the fixed
window Redis users know: INCR, then PEXPIRE on the first). Within it, exactly `rpm` requests
pass, however many arrive at once, on one replica or many: `take` checks and counts in one
step — one event loop's step for the local counter, one Lua script for Redis. Tokens are
added when a request ends (`give_back`), from the usage its engine reported, and a key whose
window holds `tpm` tokens or more is refused until the window closes.

A request can count against several scopes at once — its key's limits and its team's
(`[teams.NAME]`, docs/teams.md) — and `take_all` checks every scope before it counts any: a
request the team refuses uses none of its key's minute, and the other way round.

The local counter serves one process (the SQLite store); Redis counts across replicas.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sluicegate.store.base import StoreUnavailable
from sluicegate.store.keys import KeyLimits

WINDOW_SECONDS = 60.0

Reason = Literal["requests", "tokens", "concurrent"]


@dataclass(frozen=True, slots=True)
class Taken:
    """A request let through: what is left of the window, to tell the client."""

    requests_left: int | None
    tokens_left: int | None
    reset_seconds: float  # until the window closes
    counted_in_flight: bool


@dataclass(frozen=True, slots=True)
class Refused:
    reason: Reason
    retry_after: float  # seconds
    scope: int = 0  # which of the scopes given to `take_all` refused (0: the key's)

    def message(self, whose: str = "this API key") -> str:
        what = {
            "requests": "requests per minute",
            "tokens": "tokens per minute",
            "concurrent": "requests in flight",
        }[self.reason]
        return f"Rate limit reached for {whose} ({what}); retry after {math.ceil(self.retry_after)} s."


Counter = tuple[str, KeyLimits]  # a counter's name and its limits


class Limiter(ABC):
    async def take(self, name: str, limits: KeyLimits) -> Taken | Refused:
        """Count one request of key `name`, or refuse it without counting anything."""
        answer = await self.take_all([(name, limits)])
        return answer if isinstance(answer, Refused) else answer[0]

    @abstractmethod
    async def take_all(self, scopes: Sequence[Counter]) -> list[Taken] | Refused:
        """Count one request in every scope, or refuse it (naming the first scope over its
        limit) without counting anything anywhere: check all, then count all, in one step."""

    @abstractmethod
    async def give_back(self, name: str, limits: KeyLimits, taken: Taken, tokens: int) -> None:
        """The request ended: its place in flight is free, its tokens counted."""

    async def aclose(self) -> None:
        return None


class LocalLimiter(Limiter):
    """One process's counters; every check-and-count runs in one step of the event loop."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.requests: dict[str, tuple[float, int]] = {}  # name → (window end, count)
        self.tokens: dict[str, tuple[float, int]] = {}
        self.in_flight: dict[str, int] = {}

    @staticmethod
    def _window(table: dict[str, tuple[float, int]], name: str, now: float) -> tuple[float, int]:
        end, count = table.get(name, (0.0, 0))
        return (end, count) if now < end else (now + WINDOW_SECONDS, 0)

    async def take_all(self, scopes: Sequence[Counter]) -> list[Taken] | Refused:
        # No await between the checks and the counts: one step of the event loop.
        now = self.clock()
        for i, (name, limits) in enumerate(scopes):
            end, count = self._window(self.requests, name, now)
            token_end, tokens = self._window(self.tokens, name, now)
            if limits.rpm is not None and count >= limits.rpm:
                return Refused("requests", end - now, i)
            if limits.tpm is not None and tokens >= limits.tpm:
                return Refused("tokens", token_end - now, i)
            if limits.concurrent is not None and self.in_flight.get(name, 0) >= limits.concurrent:
                return Refused("concurrent", 1.0, i)
        return [self._count(name, limits, now) for name, limits in scopes]

    def _count(self, name: str, limits: KeyLimits, now: float) -> Taken:
        end, count = self._window(self.requests, name, now)
        _token_end, tokens = self._window(self.tokens, name, now)
        self.requests[name] = (end, count + 1)
        counted = limits.concurrent is not None
        if counted:
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
        return Taken(
            None if limits.rpm is None else limits.rpm - count - 1,
            None if limits.tpm is None else limits.tpm - tokens,
            end - now,
            counted,
        )

    async def give_back(self, name: str, limits: KeyLimits, taken: Taken, tokens: int) -> None:
        if taken.counted_in_flight:
            self.in_flight[name] = max(0, self.in_flight.get(name, 0) - 1)
        if tokens and limits.tpm is not None:
            now = self.clock()
            end, count = self._window(self.tokens, name, now)
            self.tokens[name] = (end, count + tokens)


# Per scope i (from 0), KEYS[3i+1..3i+3]: requests window, tokens window, in flight; ARGV[1]:
# window ms, ARGV[3i+2..3i+4]: rpm, tpm, concurrent (-1: none). Every scope is checked before
# any is counted. Returns {0, then per scope: requests left, tokens left, window ms left} or
# {1|2|3, retry ms, scope}.
_TAKE = """
local window, n = tonumber(ARGV[1]), #KEYS / 3
for i = 0, n - 1 do
    local k, a = 3 * i, 3 * i + 1
    local rpm, tpm, cc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if rpm >= 0 and tonumber(redis.call('GET', KEYS[k + 1]) or '0') >= rpm then
        return {1, redis.call('PTTL', KEYS[k + 1]), i}
    end
    if tpm >= 0 and tonumber(redis.call('GET', KEYS[k + 2]) or '0') >= tpm then
        return {2, redis.call('PTTL', KEYS[k + 2]), i}
    end
    if cc >= 0 and tonumber(redis.call('GET', KEYS[k + 3]) or '0') >= cc then return {3, 1000, i} end
end
local answer = {0}
for i = 0, n - 1 do
    local k, a = 3 * i, 3 * i + 1
    local rpm, tpm, cc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local count = redis.call('INCR', KEYS[k + 1])
    if count == 1 then redis.call('PEXPIRE', KEYS[k + 1], window) end
    if cc >= 0 then
        redis.call('INCR', KEYS[k + 3])
        redis.call('PEXPIRE', KEYS[k + 3], 3600000)
    end
    local tokens = tonumber(redis.call('GET', KEYS[k + 2]) or '0')
    table.insert(answer, rpm - count)
    table.insert(answer, tpm - tokens)
    table.insert(answer, redis.call('PTTL', KEYS[k + 1]))
end
return answer
"""
# KEYS: tokens window, in flight. ARGV: tokens, counted in flight (0/1), window ms.
_GIVE_BACK = """
if tonumber(ARGV[2]) == 1 and tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then
    redis.call('DECR', KEYS[2])
end
local tokens = tonumber(ARGV[1])
if tokens > 0 then
    if redis.call('INCRBY', KEYS[1], tokens) == tokens then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
end
return 1
"""
_REASONS: dict[int, Reason] = {1: "requests", 2: "tokens", 3: "concurrent"}


class RedisLimiter(Limiter):
    """Counters every replica shares; each check-and-count is one atomic script."""

    PREFIX = "sluicegate:limit:"

    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis

        self.redis: Any = Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._take = self.redis.register_script(_TAKE)
        self._give_back = self.redis.register_script(_GIVE_BACK)

    def _keys(self, name: str) -> tuple[str, str, str]:
        return (f"{self.PREFIX}r:{name}", f"{self.PREFIX}t:{name}", f"{self.PREFIX}c:{name}")

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        from redis.exceptions import RedisError

        try:
            return await script(keys=keys, args=args)
        except RedisError as exc:
            raise StoreUnavailable(f"the rate limiter cannot reach Redis: {exc}") from exc

    async def take_all(self, scopes: Sequence[Counter]) -> list[Taken] | Refused:
        def arg(value: int | None) -> int:
            return -1 if value is None else value

        keys: list[str] = []
        args: list[int] = [int(WINDOW_SECONDS * 1000)]
        for name, limits in scopes:
            keys += self._keys(name)
            args += [arg(limits.rpm), arg(limits.tpm), arg(limits.concurrent)]
        answer = await self._call(self._take, keys, args)
        if answer[0] != 0:
            return Refused(_REASONS[int(answer[0])], max(int(answer[1]), 0) / 1000 or 1.0, int(answer[2]))
        taken = []
        for i, (_name, limits) in enumerate(scopes):
            left, tokens_left, ttl = (int(x) for x in answer[1 + 3 * i : 4 + 3 * i])
            taken.append(
                Taken(
                    None if limits.rpm is None else left,
                    None if limits.tpm is None else tokens_left,
                    max(ttl, 0) / 1000,
                    limits.concurrent is not None,
                )
            )
        return taken

    async def give_back(self, name: str, limits: KeyLimits, taken: Taken, tokens: int) -> None:
        _requests, token_key, flight_key = self._keys(name)
        counted = 1 if taken.counted_in_flight else 0
        tokens = tokens if limits.tpm is not None else 0
        if counted or tokens:
            await self._call(
                self._give_back, [token_key, flight_key], [tokens, counted, int(WINDOW_SECONDS * 1000)]
            )

    async def aclose(self) -> None:
        await self.redis.aclose()


def open_limiter(backend: Literal["sqlite", "redis"], *, url: str) -> Limiter:
    """Counted where the keys are: in this process beside SQLite, in Redis beside Redis."""
    if backend == "redis":
        return RedisLimiter(url)
    return LocalLimiter()
