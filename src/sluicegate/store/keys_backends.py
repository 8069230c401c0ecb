"""The two homes of runtime API keys (`store/keys.py`): a table in the SQLite store's file, or a
hash in the Redis store's server. Both answer `version()` with one cheap read."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, Literal

import orjson

from sluicegate.store.base import StoreUnavailable
from sluicegate.store.keys import KeyRecord, KeyStore, duplicate, unknown

SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    name TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys_version (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO api_keys_version (id, version) VALUES (0, 0);
"""


class SQLiteKeyStore(KeyStore):
    """A table in the store's SQLite file. Each call opens its own short-lived connection on a
    worker thread: the CLI and every server process on the machine may write, and a write
    waits (busy timeout) rather than fails while another is under way."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        if not self._ready:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            self._ready = True
        db.execute("PRAGMA synchronous=FULL")  # a key an admin was shown is durable
        return db

    async def _run(self, fn: Any, *args: Any) -> Any:
        def call() -> Any:
            db = self._connect()
            try:
                return fn(db, *args)
            finally:
                db.close()

        try:
            return await asyncio.to_thread(call)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the key store cannot be read: {exc}") from exc

    async def version(self) -> int:
        def read(db: sqlite3.Connection) -> int:
            row = db.execute("SELECT version FROM api_keys_version WHERE id = 0").fetchone()
            return int(row[0]) if row else 0

        return int(await self._run(read))

    async def all(self) -> list[KeyRecord]:
        def read(db: sqlite3.Connection) -> list[KeyRecord]:
            rows = db.execute("SELECT record FROM api_keys ORDER BY name").fetchall()
            return [KeyRecord.load(orjson.loads(row[0])) for row in rows]

        records: list[KeyRecord] = await self._run(read)
        return records

    @staticmethod
    def _write(db: sqlite3.Connection, sql: str, record: KeyRecord) -> int:
        with db:  # one transaction: the row and the version move together
            db.execute("BEGIN IMMEDIATE")
            changed = db.execute(sql, (record.name, record.digest, orjson.dumps(record.dump()))).rowcount
            db.execute("UPDATE api_keys_version SET version = version + 1 WHERE id = 0")
        return int(changed)

    async def insert(self, record: KeyRecord) -> None:
        sql = "INSERT INTO api_keys (name, digest, record) VALUES (?, ?, ?)"
        try:
            await self._run(self._write, sql, record)
        except sqlite3.IntegrityError as exc:
            raise duplicate(record.name) from exc

    async def replace(self, record: KeyRecord) -> None:
        sql = "UPDATE api_keys SET digest = ?2, record = ?3 WHERE name = ?1"
        if not await self._run(self._write, sql, record):
            raise unknown(record.name)


class RedisKeyStore(KeyStore):
    """A hash of name → record and a version counter, shared by every replica on the server."""

    KEYS = "sluicegate:apikeys"
    VERSION = "sluicegate:apikeys:version"

    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis  # imported only when the Redis store is configured

        self.redis: Any = Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)

    async def _call(self, coro: Any) -> Any:
        from redis.exceptions import RedisError

        try:
            return await coro
        except RedisError as exc:
            raise StoreUnavailable(f"the key store cannot be reached: {exc}") from exc

    async def version(self) -> int:
        return int(await self._call(self.redis.get(self.VERSION)) or 0)

    async def all(self) -> list[KeyRecord]:
        raw = await self._call(self.redis.hgetall(self.KEYS))
        return sorted((KeyRecord.load(orjson.loads(v)) for v in raw.values()), key=lambda r: r.name)

    async def _write(self, record: KeyRecord, mode: Literal["insert", "replace"]) -> bool:
        # HSETNX for a new name, HEXISTS-guarded HSET for an update; the version moves with it
        # in one MULTI/EXEC, and a script keeps the check and the write atomic across replicas.
        script = """
        local exists = redis.call('HEXISTS', KEYS[1], ARGV[1])
        if (ARGV[3] == 'insert' and exists == 1) or (ARGV[3] == 'replace' and exists == 0) then
            return 0
        end
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
        redis.call('INCR', KEYS[2])
        return 1
        """
        blob = orjson.dumps(record.dump())
        done = await self._call(self.redis.eval(script, 2, self.KEYS, self.VERSION, record.name, blob, mode))
        return bool(done)

    async def insert(self, record: KeyRecord) -> None:
        if not await self._write(record, "insert"):
            raise duplicate(record.name)

    async def replace(self, record: KeyRecord) -> None:
        if not await self._write(record, "replace"):
            raise unknown(record.name)

    async def aclose(self) -> None:
        await self.redis.aclose()


def open_key_store(backend: Literal["sqlite", "redis"], *, path: Path, url: str) -> KeyStore:
    """Beside the responses: the SQLite store's file, or the Redis store's server."""
    if backend == "redis":
        return RedisKeyStore(url)
    return SQLiteKeyStore(path)
