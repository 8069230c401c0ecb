"""Which store the settings name (app/factory.py passes them: the store layer does not read config)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from sluicegate.store.base import Store


def open_store(backend: Literal["sqlite", "redis"], *, path: Path, url: str) -> Store:
    """SQLite at `path` by default; Redis at `url` for state shared by replicas."""
    if backend == "redis":
        from sluicegate.store.redis import RedisStore  # redis-py is imported only when used

        return RedisStore(url)
    from sluicegate.store.sqlite import SQLiteStore

    return SQLiteStore(path)
