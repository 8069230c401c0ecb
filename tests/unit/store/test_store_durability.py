"""kill -9 while writing: every write whose call returned is in the reopened store, intact.

A subprocess (tests/store_writer.py) puts responses and appends run events as fast as it can,
printing each write once it returned; the test SIGKILLs it at a different moment each round.
The reopened store must hold every printed write exactly, the SQLite file must pass
`PRAGMA integrity_check`, and the run the dead process left in flight must come back failed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from redis_support import RedisServer, redis_server
from sluicegate.store.base import Store
from sluicegate.store.redis import RedisStore
from sluicegate.store.sqlite import SQLiteStore
from store_writer import SCOPE, deterministic

WRITER = Path(__file__).resolve().parents[2] / "store_writer.py"
ROUNDS = 5


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


def write_then_kill(args: list[str], kill_after: int) -> tuple[int, int]:
    """Runs the writer until it printed `kill_after` puts, SIGKILLs it; (last put, events)."""
    process = subprocess.Popen([sys.executable, str(WRITER), *args], stdout=subprocess.PIPE)
    assert process.stdout is not None
    last_put, events = -1, 0
    try:
        for line in process.stdout:
            word, _, value = line.decode().partition(" ")
            if word == "put":
                last_put = int(value)
            elif word == "events":
                events = int(value)
            if last_put + 1 >= kill_after:
                break
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert last_put + 1 >= kill_after, "the writer stopped before it was killed"
    return last_put, events


async def check(store: Store, last_put: int, events: int) -> None:
    for n in range(last_put + 1):
        assert await store.get(f"resp_{n}", scope=SCOPE, events=False) == deterministic(n)
    frames: list[bytes] = []
    while chunk := await store.events_after("resp_run", len(frames) - 1, scope=SCOPE):
        frames += chunk
    assert len(frames) >= events
    assert all(f'"sequence_number":{i}'.encode() in f for i, f in enumerate(frames))


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_sqlite_keeps_every_returned_write_across_kill_9(tmp_path: Path, round_: int) -> None:
    path = tmp_path / "store.sqlite3"
    last_put, events = write_then_kill(["sqlite", str(path)], random.Random(round_).randint(1, 80))
    store = SQLiteStore(path)
    try:
        assert await store.integrity_check() == "ok"
        await check(store, last_put, events)
        assert await store.run_in_flight("resp_run", scope=SCOPE)
        await store.start()  # recovery
        run = await store.get("resp_run", scope=SCOPE, events=False)
        assert run is not None and run.response["status"] == "failed"
        assert run.response["error"]["code"] == "server_restarted"
        assert await store.integrity_check() == "ok"
    finally:
        await store.aclose()


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_redis_keeps_every_returned_write_and_fails_the_dead_owners_run(
    shared_redis: RedisServer, round_: int
) -> None:
    prefix = f"k{uuid.uuid4().hex[:8]}:"
    last_put, events = write_then_kill(
        ["redis", shared_redis.url, prefix], random.Random(round_).randint(1, 80)
    )
    store = RedisStore(shared_redis.url, prefix=prefix)
    try:
        await check(store, last_put, events)
        while not await store.recover_in_flight():  # once the dead writer's lease expired
            await asyncio.sleep(0.1)
        run = await store.get("resp_run", scope=SCOPE, events=False)
        assert run is not None and run.response["status"] == "failed"
        assert run.response["error"]["code"] == "owner_lost"
    finally:
        await store.aclose()
