"""Picking a replica: the fewest requests in flight among the available ones, else among all;
one replica is picked without comparing (what the general rule gives it too)."""

from __future__ import annotations

import time

import pytest

from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.replicas import ReplicaSet


def replicas(*urls: str) -> ReplicaSet:
    return ReplicaSet(parse_config({"id": "m", "base_urls": list(urls)}, env={}))


@pytest.mark.parametrize("urls", [("http://a/v1",), ("http://a/v1", "http://b/v1")])
def test_the_pick_follows_availability_and_load(urls: tuple[str, ...]) -> None:
    group = replicas(*urls)
    first = group.replicas[0]
    assert group.pick(set()) in group.replicas
    first.healthy = False  # out, but the only one left to try is still tried
    first.down_until = time.monotonic() + 60
    picked = group.pick(set())
    assert picked is (first if len(urls) == 1 else group.replicas[1])
    assert group.pick(set(group.replicas)) is None
    if len(urls) == 2:
        first.healthy, first.down_until = True, 0.0
        group.replicas[1].outstanding = 3
        assert group.pick(set()) is first
        assert group.pick({first}) is group.replicas[1]
