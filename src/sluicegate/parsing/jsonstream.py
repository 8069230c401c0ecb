"""Tool-call arguments that leave while the model writes them.

`JsonArgs` passes a JSON value through piece by piece with the whitespace outside its strings
dropped, and says where the value ends: the pieces concatenate to the model's JSON, compact,
which is valid JSON exactly when the model's was. `JsonObjectWriter` builds an arguments object
from key/value markup (XML-style parameters) so that every piece it emits is a prefix of the
final JSON text.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_WS = " \t\r\n"
_SPECIAL = re.compile(r'["\\{}\[\] \t\r\n]')
_IN_STRING = re.compile(r'["\\]')


class JsonArgs:
    """One JSON value streamed through; `feed` returns (compact piece, rest after the value's
    end or None while it goes on)."""

    __slots__ = ("_depth", "_escape", "_in_string", "_started", "done")

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._started = False
        self.done = False

    def feed(self, text: str) -> tuple[str, str | None]:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            if self._escape:
                self._escape = False
                out.append(text[i])
                i += 1
                continue
            if self._in_string:
                m = _IN_STRING.search(text, i)
                if m is None:
                    out.append(text[i:])
                    break
                j = m.start()
                out.append(text[i : j + 1])
                if text[j] == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                    if self._depth == 0:  # a bare string value
                        self.done = True
                        return "".join(out), text[j + 1 :]
                i = j + 1
                continue
            m = _SPECIAL.search(text, i)
            if m is None:
                out.append(text[i:])
                self._started = self._started or i < n
                break
            j = m.start()
            if j > i:
                out.append(text[i:j])
                self._started = True
            c = text[j]
            i = j + 1
            if c in _WS:
                continue
            out.append(c)
            self._started = True
            if c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self.done = True
                    return "".join(out), text[i:]
        return "".join(out), None

    @property
    def started(self) -> bool:
        return self._started

    @property
    def in_string(self) -> bool:
        return self._in_string


def compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def json_or_text(text: str) -> Any:
    """A parameter value written as markup: JSON when it is JSON, the text itself otherwise."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def quoted_piece(text: str) -> str:
    """`text` escaped as the inside of a JSON string."""
    return orjson.dumps(text).decode()[1:-1]
