"""Sealed blobs: state a client carries for the server (`compaction` items' and reasoning items'
`encrypted_content`), opaque to it and really sealed.

AES-256-GCM with a server key, bound to a *scope* (a hash of the API key the request used) and a
*purpose* (what the blob holds) as associated data: a blob opens only for the key that sealed it
and only as what it was sealed as. A tampered, truncated, foreign or other-key blob is a 400,
never a 500. The server key lives in `<data_dir>/sealing.key` (created once, mode 0600), so blobs
survive restarts and are shared by replicas that share the data directory.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from sluicegate.core.errors import invalid
from sluicegate.core.scope import scope_of

__all__ = ["Sealer", "load_key", "scope_of", "sealer_for"]  # scope_of: defined in core/scope.py

PREFIX = "sg1."  # format version: a later format can be told apart
NONCE_BYTES = 12
KEY_FILE = "sealing.key"
# Purposes of the conversation's sealed items (`core/items.py`): a compaction's summary, and
# reasoning handed to a client that stores nothing.
COMPACTION = "compaction"
REASONING = "reasoning"
Json = dict[str, Any]

if TYPE_CHECKING:  # imported by the first seal or unseal: ~7 MiB a server may never need
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a sealing key is 32 bytes")
        self._key = key
        self._cipher: AESGCM | None = None

    @property
    def _aead(self) -> AESGCM:
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._key)
        return self._cipher

    @staticmethod
    def _aad(purpose: str, scope: str) -> bytes:
        return b"sluicegate-seal-v1\x00" + purpose.encode() + b"\x00" + scope.encode()

    def seal(self, payload: Json, *, purpose: str, scope: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, orjson.dumps(payload), self._aad(purpose, scope))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def unseal(self, blob: str, *, purpose: str, scope: str, param: str) -> Json:
        """The payload, or a 400 naming `param` when the blob is not one this key sealed."""
        refused = invalid(
            f"Invalid '{param}': the encrypted content could not be verified (tampered with, or sealed "
            "by another server or API key).",
            param,
            code="invalid_encrypted_content",
        )
        if not blob.startswith(PREFIX):
            raise refused
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(blob[len(PREFIX) :].encode())
            opened = self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], self._aad(purpose, scope))
            payload = orjson.loads(opened)
        except (ValueError, InvalidTag, orjson.JSONDecodeError):
            raise refused from None
        if not isinstance(payload, dict):
            raise refused
        return payload


def load_key(data_dir: Path) -> bytes:
    """The server's sealing key, created on first use."""
    path = data_dir / KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        key = os.urandom(32)  # what AESGCM.generate_key(bit_length=256) returns
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it first: use theirs
            return path.read_bytes()
        with os.fdopen(fd, "wb") as out:
            out.write(key)
    return key


_SEALERS: dict[Path, Sealer] = {}


def sealer_for(data_dir: Path) -> Sealer:
    """One sealer per data directory, for the process's lifetime."""
    sealer = _SEALERS.get(data_dir)
    if sealer is None:
        sealer = _SEALERS[data_dir] = Sealer(load_key(data_dir))
    return sealer
