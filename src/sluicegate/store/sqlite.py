"""The default store: one SQLite file under the data directory.

sqlite3 calls are short and run in a worker thread so the event loop never waits on disk.
One connection, serialised by a lock; WAL mode keeps readers and the writer apart.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from sluicegate.store.base import Json, Store, StoredResponse

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    response BLOB NOT NULL,
    input_items BLOB NOT NULL,
    conversation BLOB NOT NULL,
    events BLOB,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    id TEXT NOT NULL,
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    call_id TEXT,
    type TEXT NOT NULL,
    item BLOB NOT NULL,
    PRIMARY KEY (response_id, id)
);
CREATE INDEX IF NOT EXISTS items_by_id ON items(id);
CREATE INDEX IF NOT EXISTS items_by_call ON items(call_id);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses(expires_at);
"""


def _pack_events(events: list[bytes]) -> bytes:
    return orjson.dumps([e.decode() for e in events])


def _unpack_events(blob: bytes | None) -> list[bytes]:
    return [e.encode() for e in orjson.loads(blob)] if blob else []


class SQLiteStore(Store):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = asyncio.Lock()

    async def _run(self, fn: Any, *args: Any) -> Any:
        async with self._lock:
            return await asyncio.to_thread(fn, *args)

    def _put(self, r: StoredResponse) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            db.execute("DELETE FROM items WHERE response_id = ?", (r.id,))
            db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    r.id,
                    orjson.dumps(r.response),
                    orjson.dumps(r.input_items),
                    orjson.dumps(r.conversation),
                    _pack_events(r.events) if r.events else None,
                    r.created_at,
                    r.expires_at,
                ),
            )
            rows = [
                (item["id"], r.id, item.get("call_id"), item.get("type", "message"), orjson.dumps(item))
                for item in [*r.input_items, *r.response.get("output", [])]
                if isinstance(item.get("id"), str)
            ]
            db.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def put(self, record: StoredResponse) -> None:
        await self._run(self._put, record)

    def _get(self, response_id: str) -> StoredResponse | None:
        row = self._db.execute(
            "SELECT id, response, input_items, conversation, created_at, expires_at, events "
            "FROM responses WHERE id = ? AND expires_at > ?",
            (response_id, time.time()),
        ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            id=row[0],
            response=orjson.loads(row[1]),
            input_items=orjson.loads(row[2]),
            conversation=orjson.loads(row[3]),
            created_at=row[4],
            expires_at=row[5],
            events=_unpack_events(row[6]),
        )

    async def get(self, response_id: str) -> StoredResponse | None:
        result: StoredResponse | None = await self._run(self._get, response_id)
        return result

    def _delete(self, response_id: str) -> bool:
        cursor = self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return cursor.rowcount > 0

    async def delete(self, response_id: str) -> bool:
        deleted: bool = await self._run(self._delete, response_id)
        return deleted

    def _find(self, column: str, value: str, type_: str | None) -> Json | None:
        query = (
            f"SELECT items.item FROM items JOIN responses ON responses.id = items.response_id "
            f"WHERE items.{column} = ? AND responses.expires_at > ?"
        )
        args: tuple[Any, ...] = (value, time.time())
        if type_ is not None:
            query += " AND items.type = ?"
            args += (type_,)
        row = self._db.execute(query + " LIMIT 1", args).fetchone()
        return None if row is None else orjson.loads(row[0])

    async def find_item(self, item_id: str) -> Json | None:
        found: Json | None = await self._run(self._find, "id", item_id, None)
        return found

    async def find_call(self, call_id: str) -> Json | None:
        found: Json | None = await self._run(self._find, "call_id", call_id, "function_call")
        return found

    def _purge(self) -> int:
        cursor = self._db.execute("DELETE FROM responses WHERE expires_at <= ?", (time.time(),))
        return cursor.rowcount

    async def purge_expired(self) -> int:
        count: int = await self._run(self._purge)
        return count

    async def aclose(self) -> None:
        async with self._lock:
            self._db.close()
