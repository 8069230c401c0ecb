"""A response head's header lines, encoded once per process instead of once per response.

uvicorn's `RequestResponseCycle.send` checks each header's name and value against two regular
expressions, lowercases the name and joins the line, for every header of every response (a
streamed chat answer: 18 `re.Pattern.search` and 9 `bytes.lower`), and our protocol then split
the written head again to put each name in canonical case (`Content-Type`; clients that read
headers into a case-sensitive dict, as llama.cpp's test client does, look them up that way).
Here a line is checked, cased and encoded the first time its (name, value) is seen and found in
a table after: a stream's fixed headers (`Content-Type: text/event-stream`, `Cache-Control`,
the server's `Server`) cost a lookup each. The table is bounded, emptied when full, so values
that change per response (an id, a length, the date) are encoded each time, as before. A few
names whose value is new in every response (`X-Request-ID`, `Date`) are never kept: the table
held every open stream's id line and its key (~0.3 KiB a stream, bench/README.md gateway
round thirteen) until it was emptied, and pushed out the lines that do repeat.

What a line means to the framing (a `Content-Length`, `Transfer-Encoding: chunked`,
`Connection: close`) is kept beside it, as uvicorn reads it. The checks are uvicorn's own
patterns (tests/unit/app/test_uvicorn_surface.py compares them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

HEADER_RE: Final = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
HEADER_VALUE_RE: Final = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")

# What a line tells the framing (`HeadLine.kind`).
PLAIN: Final = 0
LENGTH: Final = 1  # Content-Length: `HeadLine.length`
CHUNKED: Final = 2  # Transfer-Encoding: chunked
CLOSE: Final = 3  # Connection: ..., close

MAX_LINES: Final = 1024

HeadLine = tuple[bytes, int, int]  # the encoded line (CRLF included), its kind, a Content-Length

_lines: dict[tuple[bytes, bytes], HeadLine] = {}
# Names (as ASGI gives them, lowercase) whose value differs in every response: not kept.
PER_RESPONSE: Final = frozenset({b"x-request-id", b"request-id", b"date"})
# Their `Name: ` in canonical case, made once; and the last line made for each (the date's
# repeats for a second), replaced by the next: one line a name, not a stream's.
_CASED: Final = {name: name.title() + b": " for name in PER_RESPONSE}
_last: dict[bytes, tuple[bytes, HeadLine]] = {}


def head_line(name: bytes, value: bytes) -> HeadLine:
    """`Name: value\\r\\n` in canonical case, with what it means to the framing; RuntimeError
    for a name or value uvicorn would refuse (ValueError for a Content-Length not a number)."""
    key = (name, value)
    try:
        line = _lines.get(key)
    except TypeError:  # a bytearray: not a key, encoded every time
        return encode_line(bytes(name), bytes(value))
    if line is None:
        if name in PER_RESPONSE:
            return _per_response(name, value)
        line = encode_line(name, value)
        if len(_lines) >= MAX_LINES:
            _lines.clear()
        _lines[key] = line
    return line


# The server's default headers (uvicorn's `Date` and `Server`: a new list each second, for the
# date, never changed in place) as one joined run of lines, and the list they were made from.
_defaults: list[object] = [None, b""]


def default_lines(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The lines of the server's default headers joined, made once per list (every response of
    that second shares them: no line looked up per header); None when one of them means
    something to the framing (a configured `Connection: close`): then line by line."""
    if headers is _defaults[0]:
        return _defaults[1]  # type: ignore[return-value]  # the bytes put there below
    lines = [head_line(name, value) for name, value in headers]
    if any(kind for _, kind, _ in lines):
        return None
    joined = b"".join(line for line, _, _ in lines)
    _defaults[0], _defaults[1] = headers, joined
    return joined


def head_block(
    defaults: list[tuple[bytes, bytes]],
    headers: Iterable[tuple[bytes, bytes]],
    chunked: bool | None,
    length: int,
) -> tuple[bytes, bool | None, int, bool]:
    """A response head's header lines in one pass (compiled: the protocol's loop over each
    header, interpreted, was most of a head's cost), with what they tell the framing as
    uvicorn reads them in order: a Content-Length when no framing is chosen yet (`chunked`
    None), chunked over it, a `close`. Returns the lines joined, the framing
    (chunked, the expected length) and whether a line asked to close."""
    joined = default_lines(defaults)
    lines: list[bytes] = [joined] if joined is not None else []
    close = False
    for pairs in ((), headers) if joined is not None else (defaults, headers):
        for name, value in pairs:
            line, kind, size = head_line(name, value)
            if kind:
                if kind == LENGTH:
                    if chunked is None:
                        length = size
                        chunked = False
                elif kind == CHUNKED:
                    length = 0
                    chunked = True
                else:  # CLOSE
                    close = True
            lines.append(line)
    return b"".join(lines), chunked, length, close


def _per_response(name: bytes, value: bytes) -> HeadLine:
    """A line whose value is new in (nearly) every response: only the value is checked (the
    name is one of ours, its line plain), as `encode_line` would check and write it."""
    last = _last.get(name)
    if last is not None and last[0] == value:
        return last[1]
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    line = (_CASED[name] + value + b"\r\n", PLAIN, 0)
    _last[name] = (value, line)
    return line


def encode_line(name: bytes, value: bytes) -> HeadLine:
    if HEADER_RE.search(name):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    lower = name.lower()
    kind, length = PLAIN, 0
    if lower == b"content-length":
        kind, length = LENGTH, int(value.decode())
    elif lower == b"transfer-encoding" and value.lower() == b"chunked":
        kind = CHUNKED
    elif lower == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
        kind = CLOSE
    return lower.title() + b": " + value + b"\r\n", kind, length
