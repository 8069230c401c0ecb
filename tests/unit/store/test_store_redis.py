"""What only the Redis store does: replicas sharing runs, leases, cancel across replicas, outages."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from redis_support import RedisServer, redis_server
from sluicegate.core.errors import ErrorKind
from sluicegate.store.base import DONE, StoredResponse, StoreUnavailable, scope_of
from sluicegate.store.redis import RedisStore

S = scope_of("k")


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
async def replicas(
    shared_redis: RedisServer, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    prefix = f"r{uuid.uuid4().hex[:8]}:"
    # A lease of 2 s renewed every 0.2 s: only a stall of 1.8 s could lose a live run.
    lease, renew = getattr(request, "param", (2.0, 0.2))
    a = RedisStore(shared_redis.url, prefix=prefix, lease_seconds=lease, renew_seconds=renew)
    b = RedisStore(shared_redis.url, prefix=prefix, lease_seconds=lease, renew_seconds=renew)
    await a.start()
    await b.start()
    yield a, b
    await a.aclose()
    await b.aclose()


def run(response_id: str, status: str = "in_progress") -> StoredResponse:
    now = time.time()
    return StoredResponse(
        response_id, {"id": response_id, "status": status, "output": []}, [], [], now, now + 60
    )


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


def frames(first: int, n: int) -> list[bytes]:
    return [b'event: e\ndata: {"sequence_number":%d}\n\n' % i for i in range(first, first + n)]


# Leases renewed once a minute: the cancel request can only arrive by pub/sub.
@pytest.mark.parametrize("replicas", [(120.0, 60.0)], indirect=True)
async def test_a_run_started_on_one_replica_is_followed_and_cancelled_from_another(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    cancelled = asyncio.Event()
    a.on_cancel = lambda scope, rid: cancelled.set() if (scope, rid) == (S, "resp_x") else None
    b.on_cancel = lambda scope, rid: pytest.fail("the replica that does not own the run was asked to cancel")
    await a.create_run(run("resp_x"), scope=S)
    follower = asyncio.ensure_future(collect(b.follow_events("resp_x", 1, scope=S)))
    await a.append_events("resp_x", 0, frames(0, 5), scope=S)
    assert await b.events_after("resp_x", 2, scope=S) == frames(3, 2)
    assert await b.request_cancel("resp_x", scope=S) is True
    await cancelled.wait()  # A's run task would now stop and store its cancelled ending
    await a.append_events("resp_x", 5, frames(5, 1), scope=S)
    await a.finish_run(run("resp_x", "cancelled"), scope=S)
    assert await follower == b"".join(frames(2, 4)) + DONE
    got = await b.get("resp_x", scope=S)
    assert got is not None and got.response["status"] == "cancelled"
    assert await b.request_cancel("resp_x", scope=S) is False  # finished: nothing to cancel


async def test_a_live_owner_keeps_its_run_and_a_dead_one_loses_it(
    replicas: tuple[RedisStore, RedisStore],
) -> None:
    a, b = replicas
    await a.create_run(run("resp_kept"), scope=S)
    for _ in range(2 * 10):  # two lease lengths: renewed all along, never taken
        await asyncio.sleep(0.2)
        assert await b.recover_in_flight() == 0
    assert await b.run_in_flight("resp_kept", scope=S)
    follower = asyncio.ensure_future(collect(b.follow_events("resp_kept", -1, scope=S)))
    for task in a._tasks:  # A stops renewing, as a killed process does
        task.cancel()
    assert await follower == DONE  # B's periodic sweep finished it once A's lease expired
    lost = await b.get("resp_kept", scope=S)
    assert lost is not None and lost.response["error"]["code"] == "owner_lost"


async def test_redis_down_is_a_503_kind_error_and_service_resumes_when_it_returns(tmp_path: Path) -> None:
    with redis_server(tmp_path / "r") as server:
        store = RedisStore(server.url, prefix="down:")
        await store.start()
        try:
            await store.put(run("resp_1", "completed"), scope=S)
            server.stop()
            for call in (
                store.get("resp_1", scope=S),
                store.put(run("resp_2", "completed"), scope=S),
                store.find_item("x", scope=S),
                store.create_run(run("resp_3"), scope=S),
            ):
                with pytest.raises(StoreUnavailable) as raised:
                    await call
                assert raised.value.info.kind is ErrorKind.OVERLOADED and raised.value.info.status == 503
                assert raised.value.info.code == "store_unavailable"
            server.start()  # same port, empty (no persistence in the test)
            await store.put(run("resp_4", "completed"), scope=S)
            got = await store.get("resp_4", scope=S)
            assert got is not None and got.response["status"] == "completed"
        finally:
            await store.aclose()
