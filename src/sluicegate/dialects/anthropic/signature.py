"""Thinking signatures: opaque to clients, verifiable by us.

Anthropic's clients send thinking blocks back with the `signature` they were given, and a
thinking block without one is refused by Anthropic. We sign what we emit with an HMAC over the
thinking text under a server secret, so a block sent back is replayed to the model only when it
is really ours and unchanged. With `display: "omitted"` the client never sees the text, so the
signature carries it (still authenticated) and the reasoning can be restored on the next turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

PREFIX = "sg1."  # a signed digest: the client holds the text
EMBEDDED = "sg1e."  # the text travels inside the signature (display "omitted")
_DIGEST = 24  # bytes of the HMAC kept: 192 bits is plenty against forgery


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ThinkingSigner:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, text: str) -> bytes:
        return hmac.new(self._secret, b"thinking\x00" + text.encode(), hashlib.sha256).digest()[:_DIGEST]

    def sign(self, thinking: str, *, embed: bool = False) -> str:
        if embed:
            return EMBEDDED + _b64(thinking.encode()) + "." + _b64(self._mac(thinking))
        return PREFIX + _b64(self._mac(thinking))

    def verify(self, thinking: str, signature: str) -> str | None:
        """The thinking text `signature` vouches for (recovered from it when embedded), or None."""
        try:
            if signature.startswith(EMBEDDED):
                text_part, mac_part = signature[len(EMBEDDED) :].split(".", 1)
                text = _unb64(text_part).decode()
                ok = hmac.compare_digest(_unb64(mac_part), self._mac(text))
                return text if ok and (not thinking or thinking == text) else None
            if signature.startswith(PREFIX):
                ok = hmac.compare_digest(_unb64(signature[len(PREFIX) :]), self._mac(thinking))
                return thinking if ok else None
        except (ValueError, UnicodeDecodeError):
            return None
        return None
