"""Whose data a request may see: the one definition of a *scope*, shared by the store (stored
responses, items, runs) and sealing (compaction and reasoning blobs), so a key's sealed blobs
and its stored data belong to the same scope.

A scope is a hash prefix of the API key that created something (never the key itself), or
`""` when the server has no keys configured: then every client shares one scope, whatever key
it sends (`unused`, `sk-…`). `""` is also the scope of every row written before scoping existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol


def scope_of(api_key: str | None) -> str:
    """The scope of an API key: a hash prefix (never the key itself); `""` without a key."""
    if not api_key:
        return ""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


def request_scope(presented_key: str | None, api_keys: list[str]) -> str:
    """The scope of a request: its (already checked) key's, or `""` when no keys are configured."""
    return scope_of(presented_key) if api_keys else ""


# Where auth leaves the runtime key a request was accepted with (`app/auth.py`): an object
# with `allows(model) -> bool` and `name`. Absent for config keys and servers without keys.
KEY_SCOPE = "sluicegate.key"


class IssuedKey(Protocol):
    name: str

    def allows(self, model: str) -> bool: ...


def issued_key(asgi_scope: Mapping[str, Any]) -> IssuedKey | None:
    """The runtime key an ASGI request was accepted with, if any."""
    key: IssuedKey | None = asgi_scope.get(KEY_SCOPE)
    return key
