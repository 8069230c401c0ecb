"""Client text in response headers."""

from __future__ import annotations

from urllib.parse import quote

_SAFE = " !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~"


def header_value(text: str, *, list_item: bool = False) -> str:
    """Text that may come from a client, fit for a response header: anything outside printable
    ASCII (control characters, CR/LF, non-Latin-1) is percent-encoded, so it can neither fail
    the header's encoding nor split it. A `list_item` (one of a comma-separated list) has its
    commas encoded too."""
    if text.isascii() and text.isprintable() and "%" not in text and not (list_item and "," in text):
        return text
    return quote(text, safe=_SAFE.replace(",", "") if list_item else _SAFE)


def safe_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers that can be sent: a value already printable ASCII is kept as it is (it may have
    been percent-encoded on purpose); any other is percent-encoded. Compiled: once a request."""
    safe: dict[str, str] = {}
    for name, value in headers.items():
        safe[name] = value if value.isascii() and value.isprintable() else header_value(value)
    return safe
