"""The keys this replica accepts, kept current: the config file's, and the runtime ones from the
key store (`store/keys.py`), re-read whenever the store's version moves (polled every
`POLL_SECONDS`, and at once after a write made through this replica's admin API).

A presented key is looked up by its SHA-256 digest: a dict lookup on a digest says nothing
through timing about any other key's value or length. Config keys keep their constant-time
comparison against every configured digest (`app/auth.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sluicegate.store.keys import KeyRecord, KeyStore, secret_digest

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # a key created or revoked on another replica works here within a second


class KeyRing:
    def __init__(self, store: KeyStore | None) -> None:
        self.store = store
        self.by_digest: dict[str, KeyRecord] = {}
        self._version: int | None = None
        self._task: asyncio.Task[None] | None = None

    def find(self, presented: bytes) -> KeyRecord | None:
        """The usable runtime key `presented` is, or None (unknown, revoked, expired)."""
        record = self.by_digest.get(secret_digest(presented))
        return record if record is not None and record.usable(time.time()) else None

    async def refresh(self) -> None:
        """Re-read the records if the store's version moved since the last read."""
        if self.store is None:
            return
        version = await self.store.version()
        if version == self._version:
            return
        records = await self.store.all()
        self.by_digest = {r.digest: r for r in records if r.revoked_at is None}
        self._version = version

    async def start(self) -> None:
        if self.store is None:
            return
        try:
            await self.refresh()
        except Exception as exc:  # the store is down at start: keep polling; config keys work
            log.warning("reading the runtime API keys failed: %s", exc)
        self._task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.refresh()
                failing = False
            except Exception as exc:  # keep the last records: a store outage revokes nothing
                if not failing:
                    log.warning("re-reading the runtime API keys failed: %s", exc)
                failing = True

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.store is not None:
            await self.store.aclose()
