"""Usage per key, model and day adds up the same in both backends, and prices it (issue 46)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from redis_support import RedisServer, redis_server
from sluicegate.store.keys import KeyBudget
from sluicegate.store.usage import (
    Price,
    RedisUsageStore,
    SQLiteUsageStore,
    UsageStore,
    Used,
    budget_state,
    price_of,
    today,
)


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["sqlite", "redis"])
async def usage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[UsageStore]:
    if request.param == "sqlite":
        yield SQLiteUsageStore(tmp_path / "store.sqlite3")
        return
    server: RedisServer = request.getfixturevalue("redis")
    store = RedisUsageStore(server.url)
    await store.redis.flushdb()
    yield store
    await store.aclose()


async def test_concurrent_adds_sum_per_key_model_and_day(usage: UsageStore) -> None:
    one = Used(requests=1, input_tokens=10, cached_tokens=4, output_tokens=5, reasoning_tokens=2, cost=0.5)
    await asyncio.gather(*(usage.add("2026-11-28", "k", "m", one) for _ in range(20)))
    await usage.add("2026-11-29", "k", "m", one)
    await usage.add("2026-11-29", "k", "n", one)
    await usage.add("2026-11-29", "other", "m", one)
    rows = await usage.rows("2026-11-28", "2026-11-29", "k")
    assert [(r.day, r.model, r.used.requests) for r in rows] == [
        ("2026-11-28", "m", 20),
        ("2026-11-29", "m", 1),
        ("2026-11-29", "n", 1),
    ]
    first = rows[0].used
    assert (first.input_tokens, first.cached_tokens, first.output_tokens, first.reasoning_tokens) == (
        200,
        80,
        100,
        40,
    )
    assert first.cost == pytest.approx(10.0)
    assert len(await usage.rows("2026-11-29", "2026-11-29")) == 3


async def test_a_budget_is_exhausted_by_tokens_or_by_money(usage: UsageStore) -> None:
    await usage.add(today(), "b", "m", Used(requests=1, input_tokens=60, output_tokens=40, cost=2.0))
    assert (await budget_state(usage, "b", KeyBudget(tokens=100, period="day"))).exhausted
    assert not (await budget_state(usage, "b", KeyBudget(tokens=101, period="day"))).exhausted
    assert (await budget_state(usage, "b", KeyBudget(cost=2.0, period="month"))).exhausted
    left = (await budget_state(usage, "b", KeyBudget(tokens=150, cost=5.0))).as_json()
    assert left["tokens_left"] == 50 and left["cost_left"] == 3.0 and left["exhausted"] is False


def test_prices_match_the_model_then_the_first_glob_and_cached_input_is_cheaper() -> None:
    prices = {"gpt-4o": Price(5.0, None, 15.0), "gpt-*": Price(1.0, 0.5, 2.0)}
    assert price_of(prices, "gpt-4o") == prices["gpt-4o"]
    assert price_of(prices, "gpt-4.1") == prices["gpt-*"] and price_of(prices, "qwen") is None
    used = Used(input_tokens=1_000_000, cached_tokens=400_000, output_tokens=500_000)
    assert prices["gpt-*"].cost(used) == pytest.approx(0.6 + 0.2 + 1.0)


def test_concurrent_first_writes_set_the_file_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of first writes: one sets WAL and the schema, the others wait for it. (Each
    setting the journal mode at once failed with "database is locked" at once, no busy wait:
    a 503 for every request of a burst after start.) The setup is held until every writer has
    connected, so without the lock all of them would be inside it together."""
    store = SQLiteUsageStore(tmp_path / "store.sqlite3")
    writers = 6
    connected = threading.Semaphore(0)
    count = threading.Lock()
    setups: list[int] = []
    real_connect, real_set_up = sqlite3.connect, store._set_up

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = real_connect(*args, **kwargs)
        connected.release()
        return db

    def set_up(db: sqlite3.Connection) -> None:
        with count:
            setups.append(1)
            first = len(setups) == 1
        if first:  # the others have all connected (and reached the check) before it goes on
            for _ in range(writers):
                assert connected.acquire(timeout=30)
        real_set_up(db)

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(store, "_set_up", set_up)
    failures: list[BaseException] = []

    def write() -> None:
        try:
            store._call(lambda db: db.execute("SELECT count(*) FROM key_usage").fetchone())
        except BaseException as exc:  # reported by the assert below
            failures.append(exc)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert len(setups) == 1
