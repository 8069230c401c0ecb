"""app/serving.py: the server settles the garbage collector once everything startup built exists."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sluicegate.app.serving import settle_garbage_collector


@pytest.fixture
def restored_gc() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_startup_objects_are_frozen(restored_gc: None) -> None:
    built_at_startup = [{"route": n} for n in range(100)]
    settle_garbage_collector()
    assert gc.get_freeze_count() >= len(built_at_startup)
    assert gc.get_threshold()[0] == 700  # young collections as CPython has them
