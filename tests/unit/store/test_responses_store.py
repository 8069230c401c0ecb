"""SQLiteStore against a real SQLite file: put/get/delete, item and call lookups, expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate.store.base import StoredResponse
from sluicegate.store.sqlite import SQLiteStore

Json = dict[str, Any]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    db = SQLiteStore(tmp_path / "nested" / "dir" / "store.sqlite3")
    yield db
    await db.aclose()


def record(
    response_id: str, *, expires_in: float = 3600.0, events: list[bytes] | None = None, n: int = 1
) -> StoredResponse:
    now = time.time()
    inputs: list[Json] = [
        {
            "type": "message",
            "id": f"msg_in_{response_id}",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        },
        {
            "type": "function_call_output",
            "id": f"fco_{response_id}",
            "call_id": f"call_{response_id}",
            "output": "x",
        },
    ]
    output: list[Json] = [
        {
            "type": "function_call",
            "id": f"fc_{response_id}",
            "call_id": f"call_{response_id}",
            "name": f"tool{n}",
            "arguments": "{}",
        },
        {"type": "message", "id": f"msg_out_{response_id}", "role": "assistant", "content": []},
    ]
    return StoredResponse(
        id=response_id,
        response={"id": response_id, "object": "response", "status": "completed", "output": output, "n": n},
        input_items=inputs,
        conversation=[
            {"type": "message", "id": "msg_earlier", "role": "user", "content": []},
            *inputs,
            *output,
        ],
        created_at=now,
        expires_at=now + expires_in,
        events=events or [],
    )


async def test_put_then_get_round_trips_everything(store: SQLiteStore) -> None:
    original = record("resp_1", events=[b"event: a\ndata: {}\n\n", "event: b\ndata: \xe9\n\n".encode()])
    await store.put(original)
    assert store.path.is_file()
    assert await store.get("resp_1") == original
    assert await store.get("resp_unknown") is None


async def test_a_record_without_events_reads_back_with_none(store: SQLiteStore) -> None:
    await store.put(record("resp_1"))
    got = await store.get("resp_1")
    assert got is not None and got.events == []


async def test_put_replaces_the_record_and_its_item_index(store: SQLiteStore) -> None:
    await store.put(record("resp_1", n=1))
    replacement = record("resp_1", n=2)
    replacement.response["output"] = replacement.response["output"][:1]  # the message is gone
    await store.put(replacement)
    got = await store.get("resp_1")
    assert got is not None and got.response["n"] == 2
    assert await store.find_item("msg_out_resp_1") is None
    call = await store.find_call("call_resp_1")
    assert call is not None and call["name"] == "tool2"


async def test_find_item_searches_input_and_output_items(store: SQLiteStore) -> None:
    await store.put(record("resp_1"))
    await store.put(record("resp_2"))
    found_input = await store.find_item("msg_in_resp_2")
    assert found_input is not None and found_input["role"] == "user"
    found_output = await store.find_item("msg_out_resp_1")
    assert found_output == {"type": "message", "id": "msg_out_resp_1", "role": "assistant", "content": []}
    # Items only in the conversation (from earlier turns) are indexed by their own response.
    assert await store.find_item("msg_earlier") is None
    assert await store.find_item("nope") is None


async def test_find_call_returns_only_function_calls(store: SQLiteStore) -> None:
    await store.put(record("resp_1"))
    call = await store.find_call("call_resp_1")
    assert call is not None and call["type"] == "function_call" and call["id"] == "fc_resp_1"
    assert await store.find_call("call_unknown") is None


async def test_delete_removes_the_record_and_its_items(store: SQLiteStore) -> None:
    await store.put(record("resp_1"))
    await store.put(record("resp_2"))
    assert await store.delete("resp_1") is True
    assert await store.get("resp_1") is None
    assert await store.find_item("msg_out_resp_1") is None
    assert await store.find_call("call_resp_1") is None
    assert await store.delete("resp_1") is False
    assert await store.get("resp_2") is not None and await store.find_call("call_resp_2") is not None


async def test_expired_records_are_invisible_and_purged(store: SQLiteStore) -> None:
    await store.put(record("resp_old", expires_in=-1.0))
    await store.put(record("resp_new"))
    assert await store.get("resp_old") is None
    assert await store.find_item("msg_out_resp_old") is None
    assert await store.find_call("call_resp_old") is None
    assert await store.purge_expired() == 1
    assert await store.purge_expired() == 0
    assert await store.delete("resp_old") is False
    assert await store.get("resp_new") is not None


async def test_records_survive_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    first = SQLiteStore(path)
    original = record("resp_1", events=[b"data: x\n\n"])
    await first.put(original)
    await first.aclose()
    second = SQLiteStore(path)
    try:
        assert await second.get("resp_1") == original
        assert await second.find_call("call_resp_1") is not None
    finally:
        await second.aclose()


async def test_concurrent_writes_and_reads(store: SQLiteStore) -> None:
    ids = [f"resp_{i}" for i in range(20)]
    await asyncio.gather(*(store.put(record(i)) for i in ids))
    got = await asyncio.gather(*(store.get(i) for i in ids))
    assert [g.id if g else None for g in got] == ids
