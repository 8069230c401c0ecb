"""The default store: one SQLite file under the data directory, for one server process.

Durability: WAL mode with `synchronous=FULL` for every write a client is told about (`put`,
`create_run`, `finish_run`, deletes): the commit returns only after the WAL is fsynced, so a
response a client saw completed survives a process crash *and* a power loss. NORMAL would
survive `kill -9` but could lose the last commits on power loss, breaking "a client told
completed can always read it back"; the cost of FULL is one fsync per stored response.
Appended event frames of a run in flight are written with `synchronous=NORMAL`: losing the
last of them on power loss loses nothing anyone was promised (the run is then marked failed),
and the next FULL commit fsyncs the WAL up to and including them anyway.

All sqlite3 calls run on the store's own one-thread executor, which owns the connection:
they never wait behind Hub downloads or tool I/O in the default thread pool, and the single
thread serialises them without a lock.

One process owns the file: at startup every run still marked in flight was left by a dead
process, and is finished as `failed` with code `server_restarted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from sluicegate.store.base import (
    Json,
    Store,
    StoredResponse,
    StoreUnavailable,
    failed_snapshot,
    indexed_items,
    lost_error,
)
from sluicegate.store.codec import (
    batches,
    dump_template,
    load_template,
    pack_batch,
    template_of,
    unpack_batch,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    scope TEXT NOT NULL,
    id TEXT NOT NULL,
    response BLOB NOT NULL,
    input_items BLOB NOT NULL,
    conversation BLOB NOT NULL,
    template BLOB,                      -- request-derived fragments of its event frames
    in_flight INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (scope, id)
);
CREATE TABLE IF NOT EXISTS items (
    scope TEXT NOT NULL,
    response_id TEXT NOT NULL,
    id TEXT NOT NULL,
    call_id TEXT,
    type TEXT NOT NULL,
    item BLOB NOT NULL,
    PRIMARY KEY (scope, response_id, id),
    FOREIGN KEY (scope, response_id) REFERENCES responses(scope, id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS run_events (
    scope TEXT NOT NULL,
    response_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    count INTEGER NOT NULL,
    frames BLOB NOT NULL,               -- codec.pack_batch
    PRIMARY KEY (scope, response_id, first_seq),
    FOREIGN KEY (scope, response_id) REFERENCES responses(scope, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS items_scope_id ON items(scope, id);
CREATE INDEX IF NOT EXISTS items_scope_call ON items(scope, call_id);
CREATE INDEX IF NOT EXISTS responses_expiry ON responses(expires_at);
CREATE INDEX IF NOT EXISTS responses_in_flight ON responses(in_flight) WHERE in_flight;
"""
PUT_BATCH = 256  # frames per row when a whole log is stored at once
READ_BATCHES = 16  # batches per events_after call: replay memory stays bounded
POLL_SECONDS = 1.0  # a follower's fallback poll (appends in this process wake it at once)


class SQLiteStore(Store):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluicegate-store")
        self._db: sqlite3.Connection | None = None
        self._executor.submit(self._open).result()
        self._wakers: dict[tuple[str, str], asyncio.Event] = {}

    # -- plumbing --------------------------------------------------------------------------

    def _open(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("PRAGMA journal_size_limit=16777216")  # a checkpointed WAL shrinks back to 16 MiB
        self._db = db
        self._migrate(db)

    def _migrate(self, db: sqlite3.Connection) -> None:
        with self._transaction():
            columns = [row[1] for row in db.execute("PRAGMA table_info(responses)")]
            unscoped = bool(columns) and "scope" not in columns  # the file of version 1
            if unscoped:
                db.execute("ALTER TABLE items RENAME TO items_v1")
                db.execute("ALTER TABLE responses RENAME TO responses_v1")
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            if unscoped:
                self._migrate_v1(db)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @staticmethod
    def _migrate_v1(db: sqlite3.Connection) -> None:
        """Version 1 (unscoped, events as one JSON list) → scope "" and batched events."""
        rows = db.execute(
            "SELECT id, response, input_items, conversation, events, created_at, expires_at FROM responses_v1"
        ).fetchall()
        for rid, response, inputs, conversation, events, created, expires in rows:
            template = template_of(orjson.loads(response))
            frames = [e.encode() for e in orjson.loads(events)] if events else []
            db.execute(
                "INSERT INTO responses VALUES ('', ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                (rid, response, inputs, conversation, dump_template(template), len(frames), created, expires),
            )
            SQLiteStore._write_log(db, "", rid, frames, template)
        db.execute("INSERT INTO items SELECT '', response_id, id, call_id, type, item FROM items_v1")
        db.execute("DROP TABLE items_v1")
        db.execute("DROP TABLE responses_v1")

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "the store is closed"
        return self._db

    @contextlib.contextmanager
    def _transaction(self, durable: bool = True) -> Any:
        db = self.db
        if not durable:
            db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            # SQLite rolls back by itself on some errors (SQLITE_FULL, SQLITE_IOERR): a ROLLBACK
            # then would raise "no transaction is active" in place of the error that matters.
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        finally:
            if not durable:
                db.execute("PRAGMA synchronous=FULL")

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.OperationalError as e:  # locked, disk full, I/O error: not the client's fault
            log.exception("the SQLite store failed")
            raise StoreUnavailable(str(e)) from e

    def _wake(self, scope: str, response_id: str) -> None:
        waker = self._wakers.pop((scope, response_id), None)
        if waker is not None:
            waker.set()

    # -- responses ---------------------------------------------------------------------------

    def _put(self, scope: str, r: StoredResponse, in_flight: bool, keep_log: bool) -> None:
        template = template_of(r.response)
        with self._transaction() as db:
            row = db.execute(
                "SELECT template, next_seq FROM responses WHERE scope = ? AND id = ?", (scope, r.id)
            ).fetchone()
            if row is not None and keep_log and not r.events:
                template_blob, next_seq = row[0], row[1]  # the log's frames were shrunk with it
            else:
                template_blob, next_seq = dump_template(template), len(r.events)
                db.execute("DELETE FROM run_events WHERE scope = ? AND response_id = ?", (scope, r.id))
            db.execute("DELETE FROM items WHERE scope = ? AND response_id = ?", (scope, r.id))
            db.execute(
                "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (scope, id) DO UPDATE SET response = excluded.response, "
                "input_items = excluded.input_items, conversation = excluded.conversation, "
                "template = excluded.template, in_flight = excluded.in_flight, "
                "next_seq = excluded.next_seq, created_at = excluded.created_at, "
                "expires_at = excluded.expires_at",
                (
                    scope,
                    r.id,
                    orjson.dumps(r.response),
                    orjson.dumps(r.input_items),
                    orjson.dumps(r.conversation),
                    template_blob,
                    int(in_flight),
                    next_seq,
                    r.created_at,
                    r.expires_at,
                ),
            )
            if r.events:
                self._write_log(db, scope, r.id, r.events, template)
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        scope,
                        r.id,
                        item["id"],
                        item.get("call_id"),
                        item.get("type", "message"),
                        orjson.dumps(item),
                    )
                    for item in indexed_items(r)
                ],
            )

    @staticmethod
    def _write_log(
        db: sqlite3.Connection, scope: str, rid: str, frames: list[bytes], template: list[bytes]
    ) -> None:
        rows = []
        for n, batch in enumerate(batches(frames, PUT_BATCH)):
            rows.append((scope, rid, n * PUT_BATCH, len(batch), pack_batch(batch, template)))
        db.executemany("INSERT INTO run_events VALUES (?, ?, ?, ?, ?)", rows)

    async def put(self, record: StoredResponse, *, scope: str = "") -> None:
        await self._call(self._put, scope, record, False, True)
        self._wake(scope, record.id)

    def _get(self, scope: str, response_id: str, events: bool) -> StoredResponse | None:
        row = self.db.execute(
            "SELECT response, input_items, conversation, created_at, expires_at, template "
            "FROM responses WHERE scope = ? AND id = ? AND expires_at > ?",
            (scope, response_id, time.time()),
        ).fetchone()
        if row is None:
            return None
        frames: list[bytes] = []
        if events:
            template = load_template(row[5])
            for (blob,) in self.db.execute(
                "SELECT frames FROM run_events WHERE scope = ? AND response_id = ? ORDER BY first_seq",
                (scope, response_id),
            ):
                frames.extend(unpack_batch(blob, template))
        return StoredResponse(
            id=response_id,
            response=orjson.loads(row[0]),
            input_items=orjson.loads(row[1]),
            conversation=orjson.loads(row[2]),
            created_at=row[3],
            expires_at=row[4],
            events=frames,
        )

    async def get(self, response_id: str, *, scope: str = "", events: bool = True) -> StoredResponse | None:
        return await self._call(self._get, scope, response_id, events)

    def _input_items(self, scope: str, response_id: str) -> list[Json] | None:
        row = self.db.execute(
            "SELECT input_items FROM responses WHERE scope = ? AND id = ? AND expires_at > ?",
            (scope, response_id, time.time()),
        ).fetchone()
        return None if row is None else orjson.loads(row[0])

    async def input_items(self, response_id: str, *, scope: str = "") -> list[Json] | None:
        return await self._call(self._input_items, scope, response_id)

    def _delete(self, scope: str, response_id: str) -> bool:
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM responses WHERE scope = ? AND id = ?", (scope, response_id))
            deleted: bool = cursor.rowcount > 0
            return deleted

    async def delete(self, response_id: str, *, scope: str = "") -> bool:
        deleted = await self._call(self._delete, scope, response_id)
        self._wake(scope, response_id)
        return deleted

    def _find(self, scope: str, column: str, value: str, type_: str | None) -> Json | None:
        query = (
            "SELECT i.item FROM items i JOIN responses r "
            "ON r.scope = i.scope AND r.id = i.response_id "
            f"WHERE i.scope = ? AND i.{column} = ? AND r.expires_at > ?"
        )
        args: tuple[Any, ...] = (scope, value, time.time())
        if type_ is not None:
            query += " AND i.type = ?"
            args += (type_,)
        row = self.db.execute(query + " ORDER BY r.created_at DESC LIMIT 1", args).fetchone()
        return None if row is None else orjson.loads(row[0])

    async def find_item(self, item_id: str, *, scope: str = "") -> Json | None:
        return await self._call(self._find, scope, "id", item_id, None)

    async def find_call(self, call_id: str, *, scope: str = "") -> Json | None:
        return await self._call(self._find, scope, "call_id", call_id, "function_call")

    def _purge(self) -> int:
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM responses WHERE expires_at <= ?", (time.time(),))
            purged: int = cursor.rowcount
            return purged

    async def purge_expired(self) -> int:
        return await self._call(self._purge)

    # -- runs ------------------------------------------------------------------------------

    async def create_run(self, record: StoredResponse, *, scope: str = "") -> None:
        await self._call(self._put, scope, record, True, False)

    def _append(self, scope: str, response_id: str, first_seq: int, frames: list[bytes]) -> None:
        with self._transaction(durable=False) as db:
            row = db.execute(
                "SELECT template, next_seq FROM responses WHERE scope = ? AND id = ?",
                (scope, response_id),
            ).fetchone()
            if row is None:
                raise KeyError(f"no stored run {response_id!r} in this scope")
            if first_seq != row[1]:
                raise ValueError(
                    f"frames of {response_id} must follow {row[1] - 1}, got first_seq={first_seq}"
                )
            blob = pack_batch(frames, load_template(row[0]))
            db.execute(
                "INSERT INTO run_events VALUES (?, ?, ?, ?, ?)",
                (scope, response_id, first_seq, len(frames), blob),
            )
            db.execute(
                "UPDATE responses SET next_seq = ? WHERE scope = ? AND id = ?",
                (first_seq + len(frames), scope, response_id),
            )

    async def append_events(
        self, response_id: str, first_seq: int, frames: list[bytes], *, scope: str = ""
    ) -> None:
        if frames:
            await self._call(self._append, scope, response_id, first_seq, list(frames))
            self._wake(scope, response_id)

    def _update(self, scope: str, response_id: str, response: Json) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE responses SET response = ? WHERE scope = ? AND id = ? AND in_flight",
                (orjson.dumps(response), scope, response_id),
            )

    async def update_run(self, response_id: str, response: Json, *, scope: str = "") -> None:
        await self._call(self._update, scope, response_id, response)

    def _events_after(self, scope: str, response_id: str, after: int) -> list[bytes] | None:
        row = self.db.execute(
            "SELECT template FROM responses WHERE scope = ? AND id = ? AND expires_at > ?",
            (scope, response_id, time.time()),
        ).fetchone()
        if row is None:
            return None
        template = load_template(row[0])
        frames: list[bytes] = []
        for first, blob in self.db.execute(
            "SELECT first_seq, frames FROM run_events WHERE scope = ? AND response_id = ? "
            "AND first_seq + count - 1 > ? ORDER BY first_seq LIMIT ?",
            (scope, response_id, after, READ_BATCHES),
        ):
            batch = unpack_batch(blob, template)
            frames.extend(batch[max(after + 1 - first, 0) :])
        return frames

    async def events_after(self, response_id: str, after: int, *, scope: str = "") -> list[bytes] | None:
        return await self._call(self._events_after, scope, response_id, after)

    def _in_flight(self, scope: str, response_id: str) -> bool:
        row = self.db.execute(
            "SELECT in_flight FROM responses WHERE scope = ? AND id = ?", (scope, response_id)
        ).fetchone()
        return bool(row and row[0])

    async def run_in_flight(self, response_id: str, *, scope: str = "") -> bool:
        return await self._call(self._in_flight, scope, response_id)

    async def wait_for_events(self, response_id: str, after: int, *, scope: str = "") -> None:
        waker = self._wakers.setdefault((scope, response_id), asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waker.wait(), POLL_SECONDS)

    async def request_cancel(self, response_id: str, *, scope: str = "") -> bool:
        # One process owns the file, so the run in flight is this process's own.
        if not await self.run_in_flight(response_id, scope=scope):
            return False
        if self.on_cancel is not None:
            self.on_cancel(scope, response_id)
        return True

    _IN_FLIGHT = "SELECT scope, id, response, template, next_seq FROM responses WHERE in_flight"

    def _fail(
        self, lost: list[tuple[Any, ...]], code: str, message: str | None = None
    ) -> list[tuple[str, str]]:
        """Finish these runs in flight (rows of `_IN_FLIGHT`) as failed with `code`."""
        for scope, rid, response, template, next_seq in lost:
            failed = failed_snapshot(orjson.loads(response), code, message)
            frames = self.lost_run_frames(failed, next_seq) if self.lost_run_frames is not None else []
            with self._transaction() as db:
                if frames:
                    blob = pack_batch(frames, load_template(template))
                    db.execute(
                        "INSERT INTO run_events VALUES (?, ?, ?, ?, ?)",
                        (scope, rid, next_seq, len(frames), blob),
                    )
                db.execute(
                    "UPDATE responses SET response = ?, in_flight = 0, next_seq = ? WHERE scope = ? AND id = ?",
                    (orjson.dumps(failed), next_seq + len(frames), scope, rid),
                )
        return [(scope, rid) for scope, rid, *_ in lost]

    def _recover(self) -> list[tuple[str, str]]:
        return self._fail(self.db.execute(self._IN_FLIGHT).fetchall(), "server_restarted")

    def _abandon(self, scope: str, response_id: str, code: str, message: str | None) -> list[tuple[str, str]]:
        own = self.db.execute(self._IN_FLIGHT + " AND scope = ? AND id = ?", (scope, response_id))
        return self._fail(own.fetchall(), code, message)

    async def abandon_run(self, response_id: str, *, scope: str = "", error: Json | None = None) -> None:
        code, message = lost_error(error)
        if await self._call(self._abandon, scope, response_id, code, message):
            log.warning("response %s could not be finished: marked failed", response_id)
            self._wake(scope, response_id)

    async def recover_in_flight(self) -> int:
        lost = await self._call(self._recover)
        for scope, rid in lost:
            log.warning("response %s was in flight when the server stopped: marked failed", rid)
            self._wake(scope, rid)
        return len(lost)

    def _integrity(self) -> str:
        (result,) = self.db.execute("PRAGMA integrity_check").fetchone()
        return str(result)

    async def integrity_check(self) -> str:
        return await self._call(self._integrity)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)
