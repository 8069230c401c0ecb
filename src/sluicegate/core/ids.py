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

POOL_BYTES = 4096  # ~170 requests' ids per system call

_lock = threading.Lock()
_pool = b""
_at = 0


def random_hex(hex_chars: int) -> str:
    """`hex_chars` (even) hex digits of the kernel's randomness, none ever handed out twice."""
    return new_id("", hex_chars)


def new_id(prefix: str, hex_chars: int = 48) -> str:
    global _pool, _at
    size = hex_chars // 2
    with _lock:
        at = _at
        if at + size > len(_pool):
            _pool = os.urandom(max(POOL_BYTES, size))
            at = 0
        _at = at + size
        return prefix + _pool[at : at + size].hex()


def _forget_pool() -> None:
    """In a forked child: the parent's unused bytes are the parent's (and its other children's)."""
    global _pool, _at
    _pool, _at = b"", 0


os.register_at_fork(after_in_child=_forget_pool)
