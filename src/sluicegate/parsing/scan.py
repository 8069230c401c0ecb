"""Small incremental scanners the output parser runs on every chunk: where a partial tag may
begin at the end of the buffer, and where a JSON value that began earlier ends."""

from __future__ import annotations

import re

_IN_STRING = re.compile(r'[\\"]')
_STRUCTURE = re.compile(r'["{}\[\]]')
_QUOTE = re.compile(r'"')


def held_from(buf: str, markers: tuple[str, ...], triggers: str) -> int:
    """The index from which `buf` could be the start of one of `markers` (len(buf) if none):
    that much must be held back until the next chunk says whether it is markup or text."""
    n = len(buf)
    start = max(0, n - max(len(m) for m in markers) + 1)
    best = n
    for c in triggers:
        i = buf.find(c, start)
        while i != -1 and i < best:
            tail = buf[i:]
            if any(m.startswith(tail) for m in markers):
                best = i
                break
            i = buf.find(c, i + 1)
    return best


class JsonScanner:
    """Finds where the JSON object or array at the start of a growing buffer ends, resuming
    where the last call stopped (strings and escapes may be split across chunks)."""

    __slots__ = ("depth", "escape", "in_string", "pos")

    def __init__(self) -> None:
        self.pos = 0
        self.depth = 0
        self.in_string = False
        self.escape = False

    def end(self, buf: str) -> int | None:
        """The index just past the value's end, or None while it is incomplete."""
        i, n = self.pos, len(buf)
        while i < n:
            if self.escape:
                self.escape = False
                i += 1
                continue
            if self.in_string:
                m = _IN_STRING.search(buf, i)
                if m is None:
                    i = n
                    break
                i = m.start()
                if buf[i] == "\\":
                    self.escape = True
                else:
                    self.in_string = False
                i += 1
                continue
            m = _STRUCTURE.search(buf, i)
            if m is None:
                i = n
                break
            i = m.start()
            c = buf[i]
            i += 1
            if c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    self.pos = i
                    return i
        self.pos = i
        return None


class QuoteTracker:
    """Whether a position in a growing buffer of JSON text is inside a string, resuming where
    the last call stopped: a closing tag written inside a JSON string does not end the call."""

    __slots__ = ("escape", "in_string", "pos")

    def __init__(self) -> None:
        self.pos = 0
        self.in_string = False
        self.escape = False

    def inside_at(self, buf: str, stop: int) -> bool:
        i = self.pos
        while i < stop:
            if self.escape:
                self.escape = False
                i += 1
                continue
            m = (_IN_STRING if self.in_string else _QUOTE).search(buf, i, stop)
            if m is None:
                break
            i = m.start() + 1
            if buf[i - 1] == "\\":
                self.escape = True
            else:
                self.in_string = not self.in_string
        self.pos = max(i, stop)
        return self.in_string
