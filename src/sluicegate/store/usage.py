"""What each runtime key used, per model and per day (UTC): requests, input, cached, output and
reasoning tokens, and their cost through the config's price table. Written when a request
ends (`app/limits.py`); read by the admin API (`GET /admin/usage`), `sluicegate keys list` and
the budget check.

Two backends, beside the keys: a table in the SQLite store's file (one upsert per request), or
one Redis hash per day (HINCRBY per counter, so replicas add up without a lock).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import sqlite3
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from sluicegate.store.base import StoreUnavailable
from sluicegate.store.keys import KeyBudget

COUNTERS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")


@dataclass(slots=True)
class Used:
    """One request's use, or a sum of them."""

    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0  # of the input, those read from a cache
    output_tokens: int = 0
    reasoning_tokens: int = 0  # of the output, those spent reasoning
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Used) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"cost": round(self.cost, 6)}


@dataclass(frozen=True, slots=True)
class Price:
    """Money per million tokens."""

    input: float = 0.0
    cached_input: float | None = None  # None: as input
    output: float = 0.0

    def cost(self, used: Used) -> float:
        cached = used.cached_tokens
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            (used.input_tokens - cached) * self.input
            + cached * cached_price
            + used.output_tokens * self.output
        ) / 1e6


def price_of(prices: dict[str, Price], model: str) -> Price | None:
    """The price of `model`: its own entry, else the first glob that matches it."""
    if model in prices:
        return prices[model]
    return next((p for glob, p in prices.items() if fnmatch.fnmatchcase(model, glob)), None)


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def period_start(period: Literal["day", "month"]) -> str:
    day = dt.datetime.now(dt.UTC).date()
    return (day if period == "day" else day.replace(day=1)).isoformat()


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: str
    key: str
    model: str
    used: Used

    def as_json(self) -> dict[str, Any]:
        return {"day": self.day, "key": self.key, "model": self.model, **self.used.as_json()}


class UsageStore(ABC):
    @abstractmethod
    async def add(self, day: str, key: str, model: str, used: Used) -> None:
        """Count one request's use."""

    @abstractmethod
    async def rows(self, since: str, until: str, key: str | None = None) -> list[UsageRow]:
        """Days `since`..`until` (inclusive, ISO dates), one row per day, key and model."""

    async def spent(self, key: str, since: str) -> Used:
        total = Used()
        for row in await self.rows(since, today(), key):
            total.add(row.used)
        return total

    async def aclose(self) -> None:
        return None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS key_usage (
    day TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (key, day, model)
);
"""


class SQLiteUsageStore(UsageStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._ready = False
        # The file's first use sets WAL and the schema once: switching the journal mode fails at
        # once ("database is locked", no busy wait) while another connection is setting it too,
        # so concurrent first writes (a burst of requests after start) each failed with a 503.
        self._setting_up = threading.Lock()

    def _call(self, fn: Any, *args: Any) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            if not self._ready:
                with self._setting_up:
                    if not self._ready:
                        self._set_up(db)
                        self._ready = True
            return fn(db, *args)
        finally:
            db.close()

    def _set_up(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA)

    async def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(self._call, fn, *args)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the usage table cannot be written: {exc}") from exc

    async def add(self, day: str, key: str, model: str, used: Used) -> None:
        sql = (
            "INSERT INTO key_usage (day, key, model, requests, input_tokens, cached_tokens, output_tokens,"
            " reasoning_tokens, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, day, model) DO UPDATE SET"
            " requests = requests + excluded.requests, input_tokens = input_tokens + excluded.input_tokens,"
            " cached_tokens = cached_tokens + excluded.cached_tokens,"
            " output_tokens = output_tokens + excluded.output_tokens,"
            " reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens, cost = cost + excluded.cost"
        )
        values = (day, key, model, *(getattr(used, c) for c in COUNTERS), used.cost)
        await self._run(lambda db: db.execute(sql, values))

    async def rows(self, since: str, until: str, key: str | None = None) -> list[UsageRow]:
        def read(db: sqlite3.Connection) -> list[UsageRow]:
            sql = f"SELECT day, key, model, {', '.join(COUNTERS)}, cost FROM key_usage WHERE day >= ? AND day <= ?"
            args: list[Any] = [since, until]
            if key is not None:
                sql += " AND key = ?"
                args.append(key)
            found = db.execute(sql + " ORDER BY day, key, model", args).fetchall()
            return [UsageRow(r[0], r[1], r[2], Used(*r[3:])) for r in found]

        rows: list[UsageRow] = await self._run(read)
        return rows


class RedisUsageStore(UsageStore):
    PREFIX = "sluicegate:usage:"
    SEP = "\x1f"

    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis

        self.redis: Any = Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)

    async def add(self, day: str, key: str, model: str, used: Used) -> None:
        from redis.exceptions import RedisError

        name = self.PREFIX + day
        field = key + self.SEP + model + self.SEP
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                for counter in COUNTERS:
                    if value := getattr(used, counter):
                        pipe.hincrby(name, field + counter, value)
                if used.cost:
                    pipe.hincrbyfloat(name, field + "cost", used.cost)
                pipe.expire(name, 400 * 86400)  # a year and a month of history
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"the usage counters cannot be reached: {exc}") from exc

    async def rows(self, since: str, until: str, key: str | None = None) -> list[UsageRow]:
        from redis.exceptions import RedisError

        day, last = dt.date.fromisoformat(since), dt.date.fromisoformat(until)
        if (last - day).days > 400:
            day = last - dt.timedelta(days=400)
        found: dict[tuple[str, str, str], Used] = {}
        try:
            while day <= last:
                raw = await self.redis.hgetall(self.PREFIX + day.isoformat())
                for field, value in raw.items():
                    who, model, counter = field.decode().split(self.SEP)
                    if key is not None and who != key:
                        continue
                    used = found.setdefault((day.isoformat(), who, model), Used())
                    setattr(used, counter, float(value) if counter == "cost" else int(value))
                day += dt.timedelta(days=1)
        except RedisError as exc:
            raise StoreUnavailable(f"the usage counters cannot be reached: {exc}") from exc
        return [UsageRow(d, k, m, u) for (d, k, m), u in sorted(found.items())]

    async def aclose(self) -> None:
        await self.redis.aclose()


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A key's budget against what it spent since its period began."""

    budget: KeyBudget
    since: str
    spent: Used

    @property
    def exhausted(self) -> bool:
        budget, spent = self.budget, self.spent
        return (budget.tokens is not None and spent.tokens >= budget.tokens) or (
            budget.cost is not None and spent.cost >= budget.cost
        )

    def as_json(self) -> dict[str, Any]:
        budget, spent = self.budget, self.spent
        return {
            **budget.as_json(),
            "since": self.since,
            "spent_tokens": spent.tokens,
            "spent_cost": round(spent.cost, 6),
            "tokens_left": None if budget.tokens is None else max(budget.tokens - spent.tokens, 0),
            "cost_left": None if budget.cost is None else round(max(budget.cost - spent.cost, 0.0), 6),
            "exhausted": self.exhausted,
        }


async def budget_state(usage: UsageStore, key: str, budget: KeyBudget) -> BudgetState:
    since = period_start(budget.period)
    return BudgetState(budget, since, await usage.spent(key, since))


def open_usage_store(backend: Literal["sqlite", "redis"], *, path: Path, url: str) -> UsageStore:
    if backend == "redis":
        return RedisUsageStore(url)
    return SQLiteUsageStore(path)
