"""Gemma 4: reasoning in `<|channel>thought … <channel|>`, calls in Gemma's own value syntax
(bare keys, strings between `<|"|>` tokens):

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

The syntax converts to JSON left to right, so the arguments stream as they are written: the
name at its `{`, punctuation as it comes, a `<|"|>` string's characters as they come (JSON-
escaped), a bare key or value when the punctuation after it ends it (a key before `:`, else a
JSON literal when it is one, or a string).
"""

from __future__ import annotations

import re

from sluicegate.parsing.calls import INVALID, parse_json
from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import AnswerMarkup, JsonCall
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import compact, json_or_text, quoted_piece
from sluicegate.parsing.markup import CallOut, Markup
from sluicegate.parsing.scan import held_from

QUOTE = '<|"|>'
CLOSE = "<tool_call|>"
_PUNCT = "{}[],:"
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IN_STRING = re.compile(r'["\\]')


def gemma_json(text: str) -> str | None:
    """Gemma's value syntax as JSON text, or None when it is not well formed."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(QUOTE, i):
            j = text.find(QUOTE, i + len(QUOTE))
            if j == -1:
                return None
            out.append(compact(text[i + len(QUOTE) : j]))
            i = j + len(QUOTE)
        elif c == '"':  # a JSON string (what a grammar-forced call writes)
            m = _JSON_STRING.match(text, i)
            if m is None:
                return None
            out.append(m.group(0))
            i = m.end()
        elif c in _PUNCT:
            out.append(c)
            i += 1
        elif c.isspace():
            i += 1
        else:
            j = i
            while j < n and text[j] not in _PUNCT and not text.startswith(QUOTE, j):
                j += 1
            token = text[i:j].strip()
            is_key = text[j : j + 1] == ":"
            out.append(compact(token) if is_key else compact(json_or_text(token)))
            i = j
    joined = "".join(out)
    return None if parse_json(joined) is INVALID else joined


class GemmaArgs:
    """Gemma's value syntax → JSON text, piece by piece (what `gemma_json` makes of it whole)."""

    __slots__ = ("_depth", "_escape", "_json_string", "_pending", "_quote", "_token")

    def __init__(self) -> None:
        self._pending = ""  # a suffix that may begin `<|"|>` or the call's close
        self._token = ""  # a bare key or value, until the punctuation after it
        self._quote = False  # inside <|"|> … <|"|>
        self._json_string = False  # inside a JSON "…" string (what a forced call writes)
        self._escape = False
        self._depth = 0

    def _flush(self, is_key: bool) -> str:
        token, self._token = self._token.strip(), ""
        if not token:
            return ""
        return compact(token) if is_key else compact(json_or_text(token))

    def feed(self, text: str) -> tuple[str, str | None, bool]:
        """(JSON piece, the text after the arguments or None while they go on, whether the
        call's close marker ended them)."""
        buf, self._pending = self._pending + text, ""
        out: list[str] = []
        i, n = 0, len(buf)
        while i < n:
            if self._quote:
                j = buf.find(QUOTE, i)
                if j == -1:
                    k = i + held_from(buf[i:], (QUOTE,), "<")
                    out.append(quoted_piece(buf[i:k]))
                    i = k
                    break
                out.append(quoted_piece(buf[i:j]) + '"')
                self._quote, i = False, j + len(QUOTE)
                continue
            if self._json_string:
                if self._escape:
                    out.append(buf[i])
                    self._escape, i = False, i + 1
                    continue
                m = _IN_STRING.search(buf, i)
                if m is None:
                    out.append(buf[i:])
                    i = n
                    break
                j = m.start()
                out.append(buf[i : j + 1])
                if buf[j] == "\\":
                    self._escape = True
                else:
                    self._json_string = False
                i = j + 1
                continue
            if buf.startswith(CLOSE, i):  # the call ends, its arguments done or not
                out.append(self._flush(False))
                return "".join(out), buf[i + len(CLOSE) :], True
            if buf.startswith(QUOTE, i):
                out.append(self._flush(False) + '"')
                self._quote, i = True, i + len(QUOTE)
                continue
            c = buf[i]
            if c == "<" and (QUOTE.startswith(buf[i:]) or CLOSE.startswith(buf[i:])):
                break  # wait: markup or text
            i += 1
            if c in _PUNCT:
                out.append(self._flush(c == ":") + c)
                self._depth += 1 if c in "{[" else -1 if c in "}]" else 0
                if self._depth <= 0 and c in "}]":
                    return "".join(out), buf[i:], False
            elif c == '"' and not self._token.strip():
                self._json_string = True
                out.append(c)
            elif not c.isspace() or self._token:
                self._token += c
        self._pending = buf[i:]
        return "".join(out), None, False


class GemmaCallReader:
    """`call:NAME{…}` up to `<tool_call|>`: the call opens at its `{`, its arguments stream."""

    def __init__(self) -> None:
        self._buf = ""
        self._state = "name"  # name | args | after
        self._args = GemmaArgs()

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        if self._state == "name":
            brace, close = self._buf.find("{"), self._buf.find(CLOSE)
            if close != -1 and (brace == -1 or close < brace):  # no arguments: a broken call
                raw = self._buf[:close].strip()
                out.call(_name(raw), raw)
                return self._buf[close + len(CLOSE) :]
            if brace == -1:
                return None
            out.begin(_name(self._buf[:brace]))
            self._buf, self._state = self._buf[brace:], "args"
        if self._state == "args":
            piece, rest, closed = self._args.feed(self._buf)
            out.args(piece)
            self._buf = ""
            if rest is None:
                return None
            if closed:
                return rest
            self._buf, self._state = rest, "after"
        head = self._buf.lstrip()  # after the arguments: the close marker, else text goes on
        if head.startswith(CLOSE):
            return head[len(CLOSE) :]
        if not head or CLOSE.startswith(head):
            return None
        return head

    def close(self, out: CallOut) -> None:
        if self._state == "name" and self._buf.strip():
            out.call(_name(self._buf), self._buf.strip())


def _name(head: str) -> str:
    head = head.strip()
    return head[len("call:") :].strip() if head.startswith("call:") else head


GEMMA4 = Family(
    "gemma4",
    has("<|tool_call>call:"),
    markup_family(
        Markup(
            calls=(("<|tool_call>", lambda tools: GemmaCallReader()),),
            drop=("<eos>", "<|channel>thought", "<|channel>", "<channel|>"),
        )
    ),
    reasoning=ReasoningStyle("<|channel>thought", "<channel|>"),
    templates=("google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"),
    answer=AnswerMarkup(thought_in_grammar=True),  # `<|channel>thought` is several tokens
    call=JsonCall(lambda n: f"<|tool_call>call:{n}", "<tool_call|>"),
)
