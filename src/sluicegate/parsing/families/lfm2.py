"""Liquid LFM2 / LFM2.5: Python-style calls between tokens,
`<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`; `<think>` reasoning.

Keyword arguments convert to a JSON object left to right, so they stream as they are written:
the call opens at its `(`, `key=` becomes `"key":`, a quoted string's characters leave as they
come (Python escapes decoded, JSON-escaped), brackets and tuples become arrays, a bare literal
(`3`, `-1.5`, `True`, `None`) leaves when the punctuation after it ends it. Triple-quoted strings
and positional arguments are not Python literals we convert: such a call's arguments are not
valid JSON (an invalid call).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from sluicegate.parsing.families.base import Family, markup_family
from sluicegate.parsing.forced import PythonCall
from sluicegate.parsing.jsonstream import compact, quoted_piece
from sluicegate.parsing.markup import CallOut, Markup
from sluicegate.parsing.quirks import Quirks, thinking

CLOSE = "<|tool_call_end|>"
_LITERALS = {
    "True": "true",
    "False": "false",
    "None": "null",
    "true": "true",
    "false": "false",
    "null": "null",
}
_ESCAPE_LENGTH = {"x": 4, "u": 6, "U": 10}
_STRING_STOP = {'"': re.compile(r'["\\]'), "'": re.compile(r"['\\]")}


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[node.id]
    return ast.literal_eval(node)


def python_calls(raw: str) -> list[tuple[str, str]] | None:
    """`[f(a=1), g(b="x")]` (or one call without the list) as (name, JSON arguments)s."""
    try:
        tree = ast.parse(raw.strip(), mode="eval").body
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in nodes:
            if not isinstance(node, ast.Call) or node.args:
                return None
            name = ast.unparse(node.func)
            calls.append((name, compact({kw.arg: _literal(kw.value) for kw in node.keywords})))
        return calls
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def _bare(token: str) -> str:
    """A bare Python literal as JSON: a number, True/False/None, else (a name) a string."""
    if token in _LITERALS:
        return _LITERALS[token]
    try:
        value = ast.literal_eval(token)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return compact(token)
    return (
        compact(value) if isinstance(value, int | float) and not isinstance(value, bool) else compact(token)
    )


def _escape_end(buf: str, i: int) -> int | None:
    """The end of the escape sequence at `buf[i]` (a backslash), or None while it may go on."""
    if i + 1 >= len(buf):
        return None
    c = buf[i + 1]
    if c in _ESCAPE_LENGTH:
        end = i + _ESCAPE_LENGTH[c]
        return end if end <= len(buf) else None
    if c == "N":
        j = buf.find("}", i)
        return j + 1 if j != -1 else None
    if c in "01234567":
        j = i + 1
        while j < len(buf) and j < i + 4 and buf[j] in "01234567":
            j += 1
        return j if j < len(buf) or j == i + 4 else None
    return i + 2


def _unescape(escape: str, quote: str) -> str:
    if escape == "\\\n":
        return ""  # a line continuation
    try:
        value = ast.literal_eval(quote + escape + quote)
    except (SyntaxError, ValueError):
        return escape
    return value if isinstance(value, str) else escape


class PythonCallsReader:
    """After `<|tool_call_start|>`: `[f(k=v, …), g(…)]` up to `<|tool_call_end|>`."""

    def __init__(self) -> None:
        self._buf = ""
        self._state = "calls"  # calls | name | key | value | done
        self._token = ""
        self._depth = 0  # brackets open inside a value
        self._quote = ""  # the quote of the string the value is in
        self._first = True  # no argument written yet in this call

    def feed(self, text: str, out: CallOut) -> str | None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while i < n:
            if self._quote:
                stop = _STRING_STOP[self._quote].search(buf, i)
                if stop is None:
                    out.args(quoted_piece(buf[i:]))
                    i = n
                    break
                j = stop.start()
                out.args(quoted_piece(buf[i:j]))
                if buf[j] == self._quote:
                    out.args('"')
                    self._quote, i = "", j + 1
                    continue
                end = _escape_end(buf, j)
                if end is None:
                    i = j
                    break  # wait for the rest of the escape
                out.args(quoted_piece(_unescape(buf[j:end], self._quote)))
                i = end
                continue
            if buf.startswith(CLOSE, i):
                self._end_value(out)
                if self._state in ("key", "value"):
                    self._state = "calls"  # the call never closed: its arguments stay open
                return buf[i + len(CLOSE) :]
            c = buf[i]
            if c == "<" and CLOSE.startswith(buf[i:]):
                break  # wait: the close marker, or text
            i += 1
            state = self._state
            if state == "calls":
                if c in "[,] \t\r\n":
                    continue
                self._state, self._token = "name", c
            elif state == "name":
                if c == "(":
                    out.begin(self._token.strip())
                    out.args("{")
                    self._state, self._token, self._first, self._depth = "key", "", True, 0
                elif c in ",]":
                    out.call(self._token.strip(), "")  # a name without arguments: invalid
                    self._state, self._token = "calls", ""
                else:
                    self._token += c
            elif state == "key":
                if c == "=":
                    out.args(("" if self._first else ",") + compact(self._token.strip()) + ":")
                    self._state, self._token, self._first = "value", "", False
                elif c == ")" and not self._token.strip():
                    out.args("}")
                    self._state = "calls"
                elif c == "," and not self._token.strip():
                    continue
                else:
                    self._token += c
            else:  # value
                self._value_char(c, out)
        self._buf = buf[i:]
        return None

    def _value_char(self, c: str, out: CallOut) -> None:
        if c in "\"'" and not self._token:
            self._quote = c
            out.args('"')
        elif c in "[({":
            self._end_value(out)
            self._depth += 1
            out.args("{" if c == "{" else "[")
        elif c in "])}":
            self._end_value(out)
            if self._depth == 0:  # the call's closing parenthesis
                out.args("}")
                self._state = "calls"
                return
            self._depth -= 1
            out.args("}" if c == "}" else "]")
        elif c in ",:":
            self._end_value(out)
            if c == "," and self._depth == 0:
                self._state = "key"
            else:
                out.args(c)
        elif c.isspace():
            self._end_value(out)
        else:
            self._token += c

    def _end_value(self, out: CallOut) -> None:
        if self._token and self._state == "value":
            out.args(_bare(self._token))
        if self._state == "value":
            self._token = ""

    def close(self, out: CallOut) -> None:
        if self._state == "name" and self._token.strip():
            out.call(self._token.strip(), "")
        elif self._state == "value":
            self._end_value(out)


LFM2 = Family(
    "lfm2",
    lambda s: "<|tool_list_start|>" in s or "List of tools: [" in s or "<|tool_call_start|>" in s,
    markup_family(Markup(calls=(("<|tool_call_start|>", lambda tools: PythonCallsReader()),))),
    templates=("LFM2-8B-A1B.jinja", "LFM2.5-Instruct.jinja", "LFM2.5-8B-A1B.jinja"),
    quirks=Quirks(adjust=(thinking(drop_content_with_calls=False),)),
    call=PythonCall("<|tool_call_start|>", "<|tool_call_end|>"),
)
