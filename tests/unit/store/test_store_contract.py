"""One contract for every store backend: SQLite in a temporary file, Redis on a real server.

Scoping (another scope's id is a missing id), runs stored from acceptance with their event
logs replayed from any sequence number and followed live, recovery of runs whose process
died, the store-backed RunLog, compact logs, and store calls that never queue behind the
default thread pool.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loop_support import settled
from redis_support import RedisServer, redis_server
from sluicegate.store.base import DONE, Store, StoredResponse, StoreUnavailable, request_scope, scope_of
from sluicegate.store.runlog import RunLog
from sluicegate.store.sqlite import SQLiteStore

Json = dict[str, Any]
A, B = scope_of("key-a"), scope_of("key-b")
TOOLS = [
    {"type": "function", "name": f"tool_{i}", "parameters": {"type": "object", "x": "y" * 200}}
    for i in range(5)
]


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


def open_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest, **kwargs: Any) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "store.sqlite3")
    from sluicegate.store.redis import RedisStore

    server: RedisServer = request.getfixturevalue("shared_redis")
    prefix = kwargs.pop("prefix", None) or f"t{uuid.uuid4().hex[:8]}:"
    return RedisStore(server.url, prefix=prefix, **kwargs)


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    db = open_backend(request.param, tmp_path, request)
    await db.start()
    yield db
    await db.aclose()


def snapshot(response_id: str, status: str = "completed", output: list[Json] | None = None) -> Json:
    return {
        "id": response_id,
        "object": "response",
        "status": status,
        "instructions": "Be brief. " * 20,
        "tools": TOOLS,
        "output": output or [],
        "background": True,
    }


def record(
    response_id: str, *, status: str = "completed", expires_in: float = 3600.0, tag: str = ""
) -> StoredResponse:
    now = time.time()
    inputs: list[Json] = [
        {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": tag}]},
    ]
    output: list[Json] = [
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": tag},
    ]
    return StoredResponse(
        id=response_id,
        response=snapshot(response_id, status, output if status == "completed" else []),
        input_items=inputs,
        conversation=[*inputs, *output],
        created_at=now,
        expires_at=now + expires_in,
    )


def frame(kind: str, seq: int, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, "sequence_number": seq, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def run_frames(response_id: str, n: int) -> list[bytes]:
    """A created frame that embeds the whole response (tools and all), then n deltas."""
    frames = [frame("response.created", 0, response=snapshot(response_id, "queued"))]
    frames += [frame("response.output_text.delta", i, item_id="msg_x", delta=f" w{i}") for i in range(1, n)]
    return frames


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


# -- scoping ---------------------------------------------------------------------------------


async def test_scope_of_hashes_the_key_and_is_empty_without_keys() -> None:
    assert scope_of(None) == scope_of("") == ""
    assert scope_of("k") == scope_of("k") != scope_of("k2")
    assert len(scope_of("secret-key")) == 32 and "secret" not in scope_of("secret-key")
    assert request_scope("anything", []) == request_scope(None, []) == ""  # no keys: one scope
    assert request_scope("k", ["k", "k2"]) == scope_of("k") != request_scope("k2", ["k", "k2"])


async def test_another_scopes_id_behaves_like_a_missing_one(store: Store) -> None:
    await store.put(record("resp_1", tag="a's text"), scope=A)
    assert (await store.get("resp_1", scope=A)) is not None
    assert await store.get("resp_1", scope=B) is None
    assert await store.get("resp_1") is None  # the unscoped default is a scope of its own
    assert await store.input_items("resp_1", scope=A) == record("resp_1", tag="a's text").input_items
    assert await store.input_items("resp_1", scope=B) is None
    assert await store.find_item("msg_1", scope=B) is None
    assert await store.find_call("call_1", scope=B) is None
    assert await store.events_after("resp_1", -1, scope=B) is None
    assert await store.request_cancel("resp_1", scope=B) is False
    assert await store.delete("resp_1", scope=B) is False
    assert await store.get("resp_1", scope=A) is not None  # B's delete touched nothing


async def test_the_same_client_chosen_ids_in_two_scopes_stay_apart(store: Store) -> None:
    await store.put(record("resp_1", tag="from a"), scope=A)
    await store.put(record("resp_1", tag="from b"), scope=B)
    item_a, item_b = await store.find_item("msg_1", scope=A), await store.find_item("msg_1", scope=B)
    assert item_a is not None and item_a["content"][0]["text"] == "from a"
    assert item_b is not None and item_b["content"][0]["text"] == "from b"
    call_b = await store.find_call("call_1", scope=B)
    assert call_b is not None and call_b["arguments"] == "from b"
    assert await store.delete("resp_1", scope=A) is True
    assert await store.find_item("msg_1", scope=A) is None
    assert await store.find_call("call_1", scope=A) is None
    assert (await store.find_call("call_1", scope=B)) == call_b


# -- records -----------------------------------------------------------------------------------


async def test_put_then_get_round_trips_a_record_and_its_log(store: Store) -> None:
    original = record("resp_1")
    original.events = run_frames("resp_1", 600)  # more than one stored batch
    await store.put(original, scope=A)
    assert await store.get("resp_1", scope=A) == original
    without = await store.get("resp_1", scope=A, events=False)
    assert without is not None and without.events == [] and without.response == original.response
    first_read = await store.events_after("resp_1", 299, scope=A)
    assert first_read and first_read == original.events[300 : 300 + len(first_read)]  # a bounded prefix
    got: list[bytes] = []
    after = 299
    while frames := await store.events_after("resp_1", after, scope=A):
        got += frames
        after += len(frames)
    assert got == original.events[300:]
    assert (
        await collect(store.follow_events("resp_1", 597, scope=A)) == b"".join(original.events[598:]) + DONE
    )


async def test_expired_records_are_gone(store: Store) -> None:
    await store.put(record("resp_old", expires_in=-1.0), scope=A)
    await store.put(record("resp_new"), scope=A)
    assert await store.get("resp_old", scope=A) is None
    assert await store.get("resp_new", scope=A) is not None
    await store.purge_expired()
    assert await store.get("resp_new", scope=A) is not None


async def test_find_call_only_returns_function_calls(store: Store) -> None:
    await store.put(record("resp_1"), scope=A)
    call = await store.find_call("call_1", scope=A)
    assert call is not None and call["type"] == "function_call"
    assert await store.find_call("msg_1", scope=A) is None


# -- runs --------------------------------------------------------------------------------------


async def test_a_run_is_stored_at_acceptance_and_followed_to_its_end(store: Store) -> None:
    accepted = record("resp_run", status="queued")
    await store.create_run(accepted, scope=A)
    stored = await store.get("resp_run", scope=A)
    assert stored is not None and stored.response["status"] == "queued"
    assert await store.run_in_flight("resp_run", scope=A)
    assert await store.find_item("msg_1", scope=A) is not None  # inputs findable at once
    assert not await store.run_in_flight("resp_run", scope=B)

    frames = run_frames("resp_run", 200)
    follower = asyncio.ensure_future(collect(store.follow_events("resp_run", 4, scope=A)))
    await store.append_events("resp_run", 0, frames[:50], scope=A)
    await store.update_run("resp_run", snapshot("resp_run", "in_progress"), scope=A)
    with pytest.raises(ValueError):
        await store.append_events("resp_run", 60, frames[60:70], scope=A)  # a gap
    for start in range(50, 200, 50):
        await store.append_events("resp_run", start, frames[start : start + 50], scope=A)
    assert not follower.done()
    for after in (-1, 0, 49, 50, 150, 199, 300):
        got: list[bytes] = []
        position = after
        while chunk := await store.events_after("resp_run", position, scope=A):
            got += chunk
            position += len(chunk)
        assert got == frames[max(after + 1, 0) :]
    await store.finish_run(record("resp_run"), scope=A)
    assert await follower == b"".join(frames[5:]) + DONE
    assert not await store.run_in_flight("resp_run", scope=A)
    done = await store.get("resp_run", scope=A)
    assert done is not None and done.response["status"] == "completed" and done.events == frames


async def test_runs_left_in_flight_are_failed_never_vanished(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    first = open_backend(backend, tmp_path, request, **({"lease_seconds": 0.3} if backend == "redis" else {}))
    await first.create_run(record("resp_lost", status="in_progress"), scope=A)
    await first.append_events("resp_lost", 0, run_frames("resp_lost", 3), scope=A)
    prefix = getattr(first, "prefix", None)
    await _as_if_killed(first)  # no finish, no lease renewal: the process died

    second = open_backend(backend, tmp_path, request, **({"prefix": prefix} if prefix else {}))
    second.lost_run_frames = lambda failed, seq: [frame("response.failed", seq, response=failed)]
    try:
        while not await second.recover_in_flight():  # redis: once the lease expired
            await asyncio.sleep(0.1)
        lost = await second.get("resp_lost", scope=A)
        assert lost is not None and lost.response["status"] == "failed"
        code = "server_restarted" if backend == "sqlite" else "owner_lost"
        assert lost.response["error"]["code"] == code
        replay = await collect(second.follow_events("resp_lost", -1, scope=A))
        assert replay.startswith(b"".join(run_frames("resp_lost", 3)))
        assert b"event: response.failed" in replay and replay.endswith(DONE)
        assert orjson.loads(replay.split(b"data: ")[-2].split(b"\n")[0])["sequence_number"] == 3
        assert await second.recover_in_flight() == 0
    finally:
        await second.aclose()


async def test_a_run_its_owner_gives_up_is_failed_at_once(store: Store) -> None:
    store.lost_run_frames = lambda failed, seq: [frame("response.failed", seq, response=failed)]
    await store.create_run(record("resp_given_up", status="in_progress"), scope=A)
    frames = run_frames("resp_given_up", 3)
    await store.append_events("resp_given_up", 0, frames, scope=A)
    follower = asyncio.ensure_future(collect(store.follow_events("resp_given_up", -1, scope=A)))
    await store.abandon_run("resp_given_up", scope=B)  # another scope's id: nothing to give up
    assert await store.run_in_flight("resp_given_up", scope=A)

    await store.abandon_run("resp_given_up", scope=A)
    assert not await store.run_in_flight("resp_given_up", scope=A)
    replay = await asyncio.wait_for(follower, 30)  # bounds a hang only
    assert replay.startswith(b"".join(frames)) and replay.endswith(DONE)
    assert orjson.loads(replay.split(b"data: ")[-2].split(b"\n")[0])["sequence_number"] == 3
    failed = await store.get("resp_given_up", scope=A)
    assert failed is not None and failed.response["status"] == "failed"
    assert failed.response["error"]["code"] == "server_error"
    await store.abandon_run("resp_given_up", scope=A)  # once ended, giving up is a no-op
    assert await store.get("resp_given_up", scope=A) == failed
    assert await store.recover_in_flight() == 0


async def test_a_run_given_up_keeps_the_failure_its_owner_showed(store: Store) -> None:
    """One failure, one code: the store records the error the owner already showed for the run
    (e.g. `store_unavailable`), not a code of its own."""
    store.lost_run_frames = lambda failed, seq: [frame("response.failed", seq, response=failed)]
    await store.create_run(record("resp_shown", status="in_progress"), scope=A)
    error = {"code": "store_unavailable", "message": "The response store is unavailable; retry shortly."}
    await store.abandon_run("resp_shown", scope=A, error=error)
    failed = await store.get("resp_shown", scope=A)
    assert failed is not None and failed.response["error"] == error
    replay = await asyncio.wait_for(collect(store.follow_events("resp_shown", -1, scope=A)), 30)
    shown = orjson.loads(replay.split(b"data: ")[-2].split(b"\n")[0])["response"]["error"]
    assert shown == error


async def _as_if_killed(store: Store) -> None:
    """Let go of a store the way a killed process does: nothing finished, nothing handed over."""
    redis = getattr(store, "redis", None)
    if redis is not None:
        store._owned.clear()  # type: ignore[attr-defined]
    await store.aclose()


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_run_log_shows_live_frames_and_its_end_only_once_stored(store: Store) -> None:
    await store.create_run(record("resp_log", status="queued"), scope=A)
    log = RunLog(store, "resp_log", scope=A, batch_frames=8, linger_seconds=0.01)
    frames = run_frames("resp_log", 30)
    early = asyncio.ensure_future(collect(log.follow()))
    await log.extend(frames[:3])  # fewer than a batch: in memory, visible at once
    live = log.follow(1)
    assert await anext(live) == frames[2]
    await log.extend(frames[3:29])  # spills whole batches into the store
    late = asyncio.ensure_future(collect(log.follow(-1)))
    finished = record("resp_log")
    real_finish = store.finish_run
    seen_before_durable: list[bytes] = []

    async def finish_and_peek(r: StoredResponse, *, scope: str = "") -> None:
        # Followers must not have the terminal frame before the record is durable.
        follower = log.follow(27)
        seen_before_durable.append(await anext(follower))
        with pytest.raises(TimeoutError):  # slowness can only make this pass, never fail
            await asyncio.wait_for(anext(follower), 0.3)
        await real_finish(r, scope=scope)

    store.finish_run = finish_and_peek  # type: ignore[method-assign]
    await log.finish(frames[29:], finished)
    assert seen_before_durable == [frames[28]]
    assert await early == b"".join(frames) + DONE
    assert await late == b"".join(frames) + DONE
    assert await collect(live) == b"".join(frames[3:]) + DONE
    assert await collect(store.follow_events("resp_log", -1, scope=A)) == b"".join(frames) + DONE
    assert not await store.run_in_flight("resp_log", scope=A)


async def test_stored_logs_do_not_repeat_the_request(store: Store) -> None:
    frames = [*run_frames("resp_big", 5), frame("response.completed", 5, response=snapshot("resp_big"))]
    raw = sum(len(f) for f in frames)
    await store.create_run(record("resp_big", status="queued"), scope=A)
    await store.append_events("resp_big", 0, frames, scope=A)
    assert await store.events_after("resp_big", -1, scope=A) == frames
    stored = await _stored_log_bytes(store, "resp_big", A)
    assert stored * 4 < raw, (stored, raw)  # two copies of ~6 KB of tools/instructions: stored once


async def _stored_log_bytes(store: Store, response_id: str, scope: str) -> int:
    if isinstance(store, SQLiteStore):

        def size() -> int:
            query = "SELECT sum(length(frames)) FROM run_events WHERE scope = ? AND response_id = ?"
            return int(store.db.execute(query, (scope, response_id)).fetchone()[0])

        return await store._call(size)
    redis = store.redis  # type: ignore[attr-defined]
    entries = await redis.xrange(store._key("e", scope, response_id))  # type: ignore[attr-defined]
    return sum(len(fields.get(b"d", b"")) for _id, fields in entries)


# -- executor ----------------------------------------------------------------------------------


async def test_store_calls_never_wait_for_a_saturated_default_executor(store: Store) -> None:
    await store.put(record("resp_1"), scope=A)
    release = threading.Event()
    loop = asyncio.get_running_loop()
    blockers = [loop.run_in_executor(None, release.wait) for _ in range(64)]  # every default worker
    try:
        got = asyncio.ensure_future(store.get("resp_1", scope=A))
        # A deadlock detector, not a timing threshold: on the default pool this never completes.
        done, _ = await asyncio.wait({got}, timeout=60)
        assert got in done and got.result() is not None
    finally:
        release.set()
        await asyncio.gather(*blockers)


# -- migration ---------------------------------------------------------------------------------

OLD_SCHEMA = """
CREATE TABLE responses (id TEXT PRIMARY KEY, response BLOB NOT NULL, input_items BLOB NOT NULL,
    conversation BLOB NOT NULL, events BLOB, created_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE items (id TEXT NOT NULL, response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    call_id TEXT, type TEXT NOT NULL, item BLOB NOT NULL, PRIMARY KEY (response_id, id));
"""


async def test_a_file_of_the_unscoped_store_opens_with_everything_in_the_keyless_scope(
    tmp_path: Path,
) -> None:
    import sqlite3

    old = record("resp_old")
    old.events = run_frames("resp_old", 300)
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.execute(
        "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            old.id,
            orjson.dumps(old.response),
            orjson.dumps(old.input_items),
            orjson.dumps(old.conversation),
            orjson.dumps([e.decode() for e in old.events]),
            old.created_at,
            old.expires_at,
        ),
    )
    call = old.response["output"][0]
    db.execute(
        "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
        ("fc_1", old.id, "call_1", "function_call", orjson.dumps(call)),
    )
    db.commit()
    db.close()
    store = SQLiteStore(path)
    try:
        assert await store.get("resp_old") == old
        assert await store.find_call("call_1") == call
        assert await store.events_after("resp_old", 297) == old.events[298:]
        assert await collect(store.follow_events("resp_old", 298)) == old.events[299] + DONE
        assert await store.get("resp_old", scope=A) is None
        assert await store.integrity_check() == "ok"
    finally:
        await store.aclose()
    reopened = SQLiteStore(path)  # a second open does not migrate again
    try:
        assert await reopened.get("resp_old") == old
    finally:
        await reopened.aclose()


async def test_a_run_log_whose_ending_cannot_be_stored_never_shows_it(store: Store) -> None:
    await store.create_run(record("resp_fail", status="queued"), scope=A)
    log = RunLog(store, "resp_fail", scope=A, batch_frames=8)
    frames = run_frames("resp_fail", 12)
    await log.extend(frames[:11])
    follower = asyncio.ensure_future(collect(log.follow()))

    async def unavailable(r: StoredResponse, *, scope: str = "") -> None:
        raise StoreUnavailable("down")

    store.finish_run = unavailable  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await log.finish(frames[11:], record("resp_fail"))
    assert await follower == b"".join(frames[:11]) + DONE


async def test_a_run_log_finished_while_its_lingering_batch_is_being_written_stores_everything(
    store: Store,
) -> None:
    # A store write, once begun, completes even when its caller is cancelled (SQLite's runs on a
    # thread; a Redis command may already be sent). `finish` once cancelled such a write and
    # wrote the same frames again: refused, the run stayed in flight for good and every
    # follower of the stored log waited forever (CI hung on it).
    await store.create_run(record("resp_race", status="queued"), scope=A)
    log = RunLog(store, "resp_race", scope=A, batch_frames=64, linger_seconds=0.01)
    frames = run_frames("resp_race", 6)
    real_append = store.append_events
    written, release = asyncio.Event(), asyncio.Event()

    async def written_then_held(
        response_id: str, first_seq: int, batch: list[bytes], *, scope: str = ""
    ) -> None:
        await real_append(response_id, first_seq, batch, scope=scope)
        if not written.is_set():  # the lingering batch: stored, but its caller not yet told
            written.set()
            await asyncio.shield(release.wait())

    store.append_events = written_then_held  # type: ignore[method-assign]
    await log.extend(frames[:5])
    await written.wait()  # the linger passed: the flusher is inside its write
    finishing = asyncio.ensure_future(log.finish(frames[5:], record("resp_race")))
    await settled()  # `finish` has met the flusher inside its write
    assert not finishing.done()
    release.set()
    await finishing
    assert not await store.run_in_flight("resp_race", scope=A)
    assert await collect(store.follow_events("resp_race", -1, scope=A)) == b"".join(frames) + DONE
    assert await collect(log.follow()) == b"".join(frames) + DONE


async def test_an_aborted_run_log_ends_its_followers_and_stays_in_flight(store: Store) -> None:
    # The writer's task died without `finish`: followers end (no hang), nothing claims an
    # ending, and the run stays in flight for recovery to fail it.
    await store.create_run(record("resp_abort", status="queued"), scope=A)
    log = RunLog(store, "resp_abort", scope=A, batch_frames=8)
    frames = run_frames("resp_abort", 3)
    await log.extend(frames)
    follower = asyncio.ensure_future(collect(log.follow()))
    log.abort()
    assert await follower == b"".join(frames) + DONE
    log.abort()  # once is enough; again is a no-op
    assert await store.run_in_flight("resp_abort", scope=A)
