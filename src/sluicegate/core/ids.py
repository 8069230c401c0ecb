"""Identifiers, prefixed the way the dialects' clients expect (`resp_`, `msg_`, `call_`, ...).

Their random part comes from the kernel's generator as before, but a pool at a time: a request
takes three ids (its request id, its response's, its first item's), and `os.urandom` is a
`getrandom` system call each. Each byte of the pool goes to one id only (a lock: ids are also
made in worker threads), and a forked child starts with an empty pool, so no two processes
share bytes.
"""

from __future__ import annotations

import os
import threading
from typing import Final

POOL_BYTES: Final = 4096  # ~170 requests' ids per system call

_lock = threading.Lock()


class _Pool:
    """The bytes drawn and where the next id starts: attributes of one object, not module
    globals (compiled, each global is a dict lookup: ~12 a call, most of an id's cost)."""

    __slots__ = ("at", "data")

    def __init__(self) -> None:
        self.data = b""
        self.at = 0


_POOL: Final = _Pool()


def random_hex(hex_chars: int) -> str:
    """`hex_chars` (even) hex digits of the kernel's randomness, none ever handed out twice."""
    return new_id("", hex_chars)


def new_id(prefix: str, hex_chars: int = 48) -> str:
    size = hex_chars // 2
    pool, lock = _POOL, _lock
    lock.acquire()
    try:
        at, data = pool.at, pool.data
        if at + size > len(data):
            data = pool.data = os.urandom(max(POOL_BYTES, size))
            at = 0
        pool.at = at + size
    finally:
        lock.release()
    return prefix + data[at : at + size].hex()


def _forget_pool() -> None:
    """In a forked child: the parent's unused bytes are the parent's (and its other children's)."""
    _POOL.data, _POOL.at = b"", 0


os.register_at_fork(after_in_child=_forget_pool)
