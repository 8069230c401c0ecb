"""Identifiers, prefixed the way the dialects' clients expect (`resp_`, `msg_`, `call_`, ...)."""

from __future__ import annotations

import os


def new_id(prefix: str, hex_chars: int = 48) -> str:
    return prefix + os.urandom(hex_chars // 2).hex()
