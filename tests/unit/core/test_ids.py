"""Ids draw the kernel's randomness a pool at a time: no id repeats another's bytes, not across
a refill, not in threads, not in a forked child (which must not reuse its parent's pool)."""

from __future__ import annotations

import os
import threading
from unittest import mock

import pytest

from sluicegate.core import ids


def test_ids_keep_their_shape_and_never_repeat() -> None:
    made = [ids.new_id("resp_") for _ in range(3 * ids.POOL_BYTES // 24)]  # across refills
    assert all(i.startswith("resp_") and len(i) == 5 + 48 for i in made)
    assert len(set(made)) == len(made)
    assert len(ids.new_id("call_", 24)) == 5 + 24


def test_one_system_call_serves_many_ids() -> None:
    ids.random_hex(ids.POOL_BYTES * 2)  # empties the pool: the next id refills it
    with mock.patch.object(ids.os, "urandom", wraps=os.urandom) as urandom:
        for _ in range(100):
            ids.new_id("req_", 16)
    assert urandom.call_count == 1


def test_threads_never_share_bytes() -> None:
    made: list[str] = []

    def make() -> None:
        made.extend(ids.random_hex(16) for _ in range(2000))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == len(made) == 8000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_draws_its_own_pool() -> None:
    ids.new_id("x")  # the parent's pool holds unused bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, ids.random_hex(32).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    theirs = os.read(read, 64).decode()
    os.close(read)
    assert theirs != ids.random_hex(32)  # the parent's next bytes are not the child's
