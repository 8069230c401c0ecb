"""A request's body from its ASGI messages: the two checks every start makes once, compiled
(the turn runner that calls them is interpreted; bench/README.md, gateway "Round sixteen").

What the messages say is read here; what to do about it (the 413, the rest of a body that came
in pieces) is the caller's (`turn/http.py` `read_json_body`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def declared_over(headers: Iterable[Any], max_bytes: int) -> bool:
    """Whether the request's `Content-Length` (the first one, as Starlette's `Headers.get`
    reads it) declares more than `max_bytes`: refused before the body is read. `headers`: the
    ASGI scope's, pairs of byte strings (tuples or lists, as the server made them)."""
    for pair in headers:
        if pair[0] == b"content-length":
            declared = bytes(pair[1]).decode("latin-1")
            return declared.isascii() and declared.isdigit() and int(declared) > max_bytes
    return False


def whole_body(message: Mapping[str, Any]) -> Any:
    """The body when `message` is an `http.request` that carries all of it (the usual case: a
    chat request's body arrives with its head); None for anything else (a disconnect, the first
    of several pieces), which the caller reads the general way."""
    if message["type"] != "http.request" or message.get("more_body", False):
        return None
    return message.get("body", b"")
