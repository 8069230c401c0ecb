"""The key limiter counts exactly: the local counter in one process, the Redis one across
clients, each check-and-count one atomic step (issue 46)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from redis_support import RedisServer, redis_server
from sluicegate.store.keys import KeyLimits
from sluicegate.store.limits import Limiter, LocalLimiter, RedisLimiter, Refused, Taken


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["local", "redis"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    if request.param == "local":
        yield LocalLimiter()
        return
    server: RedisServer = request.getfixturevalue("redis")
    made = RedisLimiter(server.url)
    await made.redis.flushdb()
    yield made
    await made.aclose()


async def test_exactly_rpm_requests_pass_however_many_arrive_at_once(limiter: Limiter) -> None:
    limits = KeyLimits(rpm=60)
    answers = await asyncio.gather(*(limiter.take("k", limits) for _ in range(100)))
    passed = [a for a in answers if isinstance(a, Taken)]
    refused = [a for a in answers if isinstance(a, Refused)]
    assert len(passed) == 60 and len(refused) == 40
    assert sorted(a.requests_left for a in passed) == list(range(60))  # type: ignore[type-var]
    assert all(r.reason == "requests" and 0 < r.retry_after <= 60 for r in refused)


async def test_in_flight_places_are_given_back(limiter: Limiter) -> None:
    limits = KeyLimits(concurrent=2)
    first, second = await limiter.take("c", limits), await limiter.take("c", limits)
    assert isinstance(first, Taken) and isinstance(second, Taken)
    third = await limiter.take("c", limits)
    assert isinstance(third, Refused) and third.reason == "concurrent"
    await limiter.give_back("c", limits, first, 0)
    assert isinstance(await limiter.take("c", limits), Taken)


async def test_tokens_used_close_the_minute_for_more(limiter: Limiter) -> None:
    limits = KeyLimits(tpm=100)
    taken = await limiter.take("t", limits)
    assert isinstance(taken, Taken) and taken.tokens_left == 100
    await limiter.give_back("t", limits, taken, 60)
    again = await limiter.take("t", limits)
    assert isinstance(again, Taken) and again.tokens_left == 40
    await limiter.give_back("t", limits, again, 50)
    refused = await limiter.take("t", limits)
    assert isinstance(refused, Refused) and refused.reason == "tokens"


async def test_keys_are_counted_apart(limiter: Limiter) -> None:
    limits = KeyLimits(rpm=1)
    assert isinstance(await limiter.take("a", limits), Taken)
    assert isinstance(await limiter.take("b", limits), Taken)
    assert isinstance(await limiter.take("a", limits), Refused)


async def test_the_local_window_opens_again_after_a_minute() -> None:
    clock = Clock()
    limiter = LocalLimiter(clock)
    limits = KeyLimits(rpm=1)
    assert isinstance(await limiter.take("k", limits), Taken)
    refused = await limiter.take("k", limits)
    assert isinstance(refused, Refused) and refused.retry_after == 60
    clock.now += 59.5
    assert isinstance(await limiter.take("k", limits), Refused)
    clock.now += 0.5
    assert isinstance(await limiter.take("k", limits), Taken)


async def test_two_clients_of_one_redis_share_the_count(redis: RedisServer, tmp_path: Path) -> None:
    a, b = RedisLimiter(redis.url), RedisLimiter(redis.url)
    try:
        await a.redis.flushdb()
        limits = KeyLimits(rpm=30)
        answers = await asyncio.gather(*(x.take("shared", limits) for x in (a, b) * 25))
        assert sum(isinstance(x, Taken) for x in answers) == 30
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_team_counts_across_its_keys_exactly_however_many_arrive_at_once(limiter: Limiter) -> None:
    key, team = KeyLimits(rpm=100), KeyLimits(rpm=20)
    answers = await asyncio.gather(
        *(limiter.take_all([(name, key), ("team:red", team)]) for name in ("a", "b") * 25)
    )
    passed = [a for a in answers if not isinstance(a, Refused)]
    refused = [a for a in answers if isinstance(a, Refused)]
    assert len(passed) == 20 and len(refused) == 30
    assert all(r.reason == "requests" and r.scope == 1 for r in refused)  # the team's, not the key's
    assert sorted(t[1].requests_left for t in passed) == list(range(20))  # type: ignore[type-var]


async def test_a_refusal_by_one_scope_counts_nothing_in_the_others(limiter: Limiter) -> None:
    key, team = KeyLimits(rpm=5, concurrent=5), KeyLimits(rpm=1)
    first = await limiter.take_all([("a", key), ("team:blue", team)])
    assert not isinstance(first, Refused)
    refused = await limiter.take_all([("a", key), ("team:blue", team)])
    assert isinstance(refused, Refused) and refused.scope == 1
    alone = await limiter.take("a", key)  # the refused request took no place of the key's
    assert isinstance(alone, Taken) and alone.requests_left == 3


async def test_the_key_refuses_before_the_team_is_counted(limiter: Limiter) -> None:
    key, team = KeyLimits(rpm=1), KeyLimits(rpm=3)
    assert not isinstance(await limiter.take_all([("a", key), ("team:green", team)]), Refused)
    refused = await limiter.take_all([("a", key), ("team:green", team)])
    assert isinstance(refused, Refused) and refused.scope == 0
    other = await limiter.take_all([("b", key), ("team:green", team)])
    assert not isinstance(other, Refused) and other[1].requests_left == 1
