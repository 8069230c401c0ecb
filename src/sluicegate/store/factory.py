"""Which store the settings name."""

from __future__ import annotations

from sluicegate.config import Settings, store_path
from sluicegate.store.base import Store


def open_store(settings: Settings) -> Store:
    """The store the settings name: SQLite by default, Redis for state shared by replicas."""
    if settings.store_backend == "redis":
        from sluicegate.store.redis import RedisStore  # redis-py is imported only when used

        return RedisStore(settings.store_url)
    from sluicegate.store.sqlite import SQLiteStore

    return SQLiteStore(store_path(settings))
