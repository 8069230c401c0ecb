"""[store]: backend, path, url and retention_days, and the store they open."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.config import load_settings, store_path
from sluicegate.engines.base import ConfigError
from sluicegate.store.factory import open_store
from sluicegate.store.redis import RedisStore
from sluicegate.store.sqlite import SQLiteStore


def settings_from(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "sluicegate.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n\n[store]\n{text}\n', encoding="utf-8")
    return load_settings(path, env={})


async def test_sqlite_is_the_default_in_the_data_dir(tmp_path: Path) -> None:
    settings = settings_from(tmp_path, "")
    assert settings.store_backend == "sqlite"
    store = open_store(settings.store_backend, path=store_path(settings), url=settings.store_url)
    try:
        assert isinstance(store, SQLiteStore) and store.path == tmp_path / "data" / "sluicegate.sqlite3"
    finally:
        await store.aclose()


async def test_redis_backend_url_and_retention(tmp_path: Path) -> None:
    settings = settings_from(
        tmp_path, 'backend = "redis"\nurl = "redis://10.0.0.5:6380/2"\nretention_days = 2'
    )
    assert (settings.store_backend, settings.store_url) == ("redis", "redis://10.0.0.5:6380/2")
    assert settings.responses_retention_days == 2.0
    # connects lazily: no server needed to build it
    store = open_store(settings.store_backend, path=store_path(settings), url=settings.store_url)
    try:
        assert isinstance(store, RedisStore) and store.url == "redis://10.0.0.5:6380/2"
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('backend = "postgres"', "[store].backend"),
        ('url = "http://localhost:6379"', "[store].url"),
        ("retention_days = 0", "[store].retention_days must be a positive number"),
        ("retention_days = true", "retention_days must be a positive number"),
        ("ttl = 3", "[store].ttl"),
    ],
)
def test_bad_store_settings_are_config_errors(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(tmp_path, text)
    assert fragment in str(caught.value)
