"""A SQLite store on a full disk: the error raised is the disk's, not the ROLLBACK's.

`PRAGMA max_page_count` makes SQLite answer SQLITE_FULL ("database or disk is full") exactly as
a full filesystem does; SQLite then rolls the transaction back itself, and a ROLLBACK of ours
raised "cannot rollback - no transaction is active", hiding the real error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sluicegate.store.base import StoredResponse, StoreUnavailable
from sluicegate.store.sqlite import SQLiteStore


def _record(rid: str, size: int) -> StoredResponse:
    response = {"id": rid, "status": "completed", "output": [{"type": "message", "text": "x" * size}]}
    return StoredResponse(rid, response, [], [], 0.0, 2e9)


async def _room(store: SQLiteStore, pages: int | None) -> None:
    """Let the file grow by `pages` more pages only (None: as far as SQLite allows)."""

    def run() -> None:
        (count,) = store.db.execute("PRAGMA page_count").fetchone()
        store.db.execute(f"PRAGMA max_page_count={count + pages if pages is not None else 1073741823}")

    await store._call(run)


def test_a_full_disk_is_reported_as_such_and_the_store_works_again_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        try:
            await store.put(_record("resp_small", 10))
            await _room(store, 2)
            with pytest.raises(StoreUnavailable) as raised:
                await store.put(_record("resp_big", 1_000_000))
            assert "database or disk is full" in raised.value.detail
            assert "cannot rollback" not in caplog.text
            assert not await store._call(lambda: store.db.in_transaction)
            await _room(store, None)
            await store.put(_record("resp_big", 1_000_000))
            got = await store.get("resp_big", events=False)
            assert got is not None and got.response["status"] == "completed"
        finally:
            await store.aclose()

    asyncio.run(main())
