"""The call syntaxes families share, as readers for `OutputParser`: what follows a call's
opening marker until the call ends.

- `JsonCallsReader`: a JSON object naming the call (`{"name": ..., "arguments": {...}}`), or an
  array of them (Hermes, Nemotron, Granite, Command R, Apertus).
- `NameJsonReader`: a name, a separator, JSON arguments (DeepSeek, Kimi, Functionary).
- `XmlCallReader`: a name and key/value parameters in tags (Qwen3-Coder, GLM, MiniMax, Seed).
- `BufferedReader`: the whole call up to its closing marker, converted at the end (for a
  syntax that cannot be converted as it comes; Gemma 4 and LFM2 have streaming readers of their
  own in their family modules).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluicegate.parsing.calls import INVALID, arguments_text, broken_call, call_from_object, parse_json
from sluicegate.parsing.jsonstream import JsonArgs, compact, json_or_text, quoted_piece
from sluicegate.parsing.markup import CallOut, Tools
from sluicegate.parsing.scan import JsonScanner, QuoteTracker, held_from


class _After:
    """Waits for a closing marker after a call's body; text other than whitespace before it
    means the marker never comes (the rest goes back to the message)."""

    __slots__ = ("buf", "marker")

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.buf = ""

    def feed(self, text: str) -> str | None:
        self.buf += text
        head = self.buf.lstrip(" \t\r\n`")
        if not head:
            return None
        if head.startswith(self.marker):
            return head[len(self.marker) :]
        if self.marker.startswith(head):
            return None
        return head


# --- JSON objects naming the call ------------------------------------------------------------

_HEAD = re.compile(
    r'\s*\{\s*(?:"(?:tool_call_id|id)"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*)?'
    r'"(?:name|tool_name)"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=[\[{"])'
)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_KEY_HEAD = re.compile(r'\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*(?=\{)')  # Apertus: {"name": {...}}


class JsonCallsReader:
    """`{"name": ..., "arguments": ...}` or an array of such, then `close` (if any). The
    arguments stream when the object starts with the name; otherwise the call leaves whole.
    `close` outside a JSON string ends the call even where the JSON has not (a broken call)."""

    def __init__(self, close: str | None, *, name_as_key: bool = False, several: bool = False) -> None:
        self._close = close
        self._name_as_key = name_as_key
        self._buf = ""
        self._state = "start"  # start | item | args | args_text | item_end | between | after | raw
        self._array = several  # objects one after another, as in an array (MiniMax M1: a line each)
        self._scan = JsonScanner()
        self._quotes = QuoteTracker()
        self._args = JsonArgs()
        self._after = _After(close) if close else None

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        while True:
            state = self._state
            if state == "start":
                head = self._buf.lstrip()
                if not head:
                    return None
                self._buf = head
                if head[0] == "[":
                    self._array = True
                    self._buf = head[1:]
                    self._state = "between"
                elif head[0] == "{":
                    self._begin_item()
                else:
                    self._state = "raw"
            elif state == "between":
                head = self._buf.lstrip(" \t\r\n,")
                self._buf = head
                if not head:
                    return None
                if head[0] == "]":
                    self._buf = head[1:]
                    self._state = "after"
                elif head[0] == "{":
                    self._begin_item()
                else:
                    self._state = "after"
            elif state == "item":
                buf = self._buf
                m = _HEAD.match(buf) or (_KEY_HEAD.match(buf) if self._name_as_key else None)
                if m is not None and not (self._name_as_key and m.re is _HEAD):
                    name = json_or_text(f'"{m.group(1)}"')
                    out.begin(name if isinstance(name, str) else m.group(1))
                    self._buf = buf[m.end() :]
                    self._args = JsonArgs()
                    self._state = "args_text" if self._buf[:1] == '"' else "args"
                    continue
                end = self._scan.end(buf)
                cut = self._cut(buf, end)
                if cut is not None:
                    out.call(*broken_call(buf[:cut]))
                    return buf[cut + len(self._close or "") :]
                if end is None:
                    return None
                self._whole(buf[:end], out)
                self._buf = buf[end:]
                self._state = "between" if self._array else "after"
            elif state == "args":
                buf = self._buf
                i = buf.find(self._close) if self._close else -1
                upto = (
                    i
                    if i != -1
                    else (held_from(buf, (self._close,), self._close[0]) if self._close else len(buf))
                )
                piece, rest = self._args.feed(buf[:upto])
                out.args(piece)
                if rest is not None:
                    self._buf = rest + buf[upto:]
                    self._item_end()
                    continue
                if i == -1:
                    self._buf = buf[upto:]
                    return None
                if not self._args.in_string:  # the call ends where its JSON did not
                    return buf[i + len(self._close or "") :]
                out.args(self._args.feed(self._close or "")[0])  # a close tag inside a string
                self._buf = buf[i + len(self._close or "") :]
            elif state == "args_text":  # arguments given as a JSON string of JSON: passed through
                m = _JSON_STRING.match(self._buf)
                if m is None:
                    return None  # (a string never closed is passed raw at the end)
                value = parse_json(m.group(0))
                out.args(value if isinstance(value, str) else m.group(0))
                self._buf = self._buf[m.end() :]
                self._item_end()
            elif state == "item_end":
                end = self._scan.end(self._buf)
                if end is None:
                    cut = self._cut(self._buf, None)
                    if cut is None:
                        return None
                    return self._buf[cut + len(self._close or "") :]
                self._buf = self._buf[end:]
                self._state = "between" if self._array else "after"
            elif state == "after":
                if self._after is None:
                    rest, self._buf = self._buf, ""
                    return rest
                rest = self._after.feed(self._buf)
                self._buf = ""
                return rest
            else:  # raw: not JSON; everything up to the closing marker is one broken call
                if self._close is None:
                    return None  # the rest of the output: one broken call at the end
                i = self._buf.find(self._close)
                if i == -1:
                    return None
                out.call(*broken_call(self._buf[:i]))
                return self._buf[i + len(self._close) :]

    def _cut(self, buf: str, end: int | None) -> int | None:
        """Where `close` ends the call before the JSON does (outside a string), if it does."""
        if self._close is None:
            return None
        i = buf.find(self._close)
        while i != -1 and (end is None or i < end):
            if not self._quotes.inside_at(buf, i):
                return i
            i = buf.find(self._close, i + 1)
        return None

    def _item_end(self) -> None:
        """After the arguments: the rest of the item's object up to its closing brace."""
        self._scan = JsonScanner()
        self._scan.depth = 1
        self._quotes = QuoteTracker()
        self._state = "item_end"

    def _begin_item(self) -> None:
        self._buf = self._buf.lstrip()
        self._scan = JsonScanner()
        self._quotes = QuoteTracker()
        self._state = "item"

    def _whole(self, raw: str, out: CallOut) -> None:
        value = parse_json(raw)
        call = None if value is INVALID else call_from_object(value, strict=False)
        if call is None and self._name_as_key and isinstance(value, dict) and len(value) == 1:
            ((name, args),) = value.items()
            call = (name, arguments_text(args))
        if call is None and isinstance(value, dict) and isinstance(value.get("tool_name"), str):
            call = (value["tool_name"], arguments_text(value.get("parameters", {})))
        out.call(*(call or broken_call(raw)))

    def close(self, out: CallOut) -> None:
        if self._state in ("item", "raw", "start") and self._buf.strip():
            out.call(*broken_call(self._buf))
        elif self._state == "start":
            out.call("", "")  # cut off right after the opening marker
        elif self._state == "args_text":
            out.args(self._buf)


# --- a name, then JSON arguments -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NameJson:
    """How a `NameJsonReader` reads: the markers that end the name, how a written name becomes
    the tool's name, and the marker that ends the call (None: the end of the JSON)."""

    name_end: tuple[str, ...]
    close: str | None = None
    clean_name: Callable[[str], str] = str.strip
    content_names: frozenset[str] = frozenset()  # a "name" that means text follows (Functionary's `all`)
    skip_before_args: str = ""  # e.g. "```json" (DeepSeek R1)


class NameJsonReader:
    def __init__(self, spec: NameJson) -> None:
        self._spec = spec
        self._buf = ""
        self._state = "name"  # name | lead | args | raw | after
        self._args = JsonArgs()
        self._after = _After(spec.close) if spec.close else None
        self._raw = ""

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        spec = self._spec
        while True:
            if self._state == "name":
                found = [(i, m) for m in spec.name_end if (i := self._buf.find(m)) != -1]
                if not found:
                    return None
                at, marker = min(found)
                name = spec.clean_name(self._buf[:at])
                self._buf = self._buf[at + len(marker) :]
                if not name or name in spec.content_names:  # no recipient, or text
                    rest, self._buf = self._buf, ""
                    return rest
                out.begin(name)
                self._state = "lead"
            elif self._state == "lead":
                head = self._buf.lstrip()
                skip = spec.skip_before_args
                if skip and (skip.startswith(head) and len(head) < len(skip)):
                    return None
                if skip and head.startswith(skip):
                    head = head[len(skip) :].lstrip()
                self._buf = head
                if not head:
                    return None
                self._state = "args" if head[0] in '{["' else "raw"
            elif self._state == "args":
                piece, left = self._args.feed(self._buf)
                out.args(piece)
                self._buf = ""
                if left is None:
                    return None
                self._buf = left
                self._state = "after"
            elif self._state == "raw":  # not JSON: up to the closing marker
                if spec.close is None:
                    return None  # the rest of the output: left at the end
                i = self._buf.find(spec.close)
                if i == -1:
                    return None
                out.args(json_text(self._buf[:i].strip()))
                return self._buf[i + len(spec.close) :]
            else:
                if self._after is None:
                    tail, self._buf = self._buf, ""
                    return tail
                after = self._after.feed(self._buf)
                self._buf = ""
                return after

    def close(self, out: CallOut) -> None:
        if self._state == "name" and self._buf.strip():
            out.call(self._spec.clean_name(self._buf), "")
        elif self._state == "lead":
            pass  # a name and no arguments: an empty (invalid) argument text
        elif self._state == "raw":
            out.args(self._buf.strip())


def json_text(text: str) -> str:
    """Arguments written without the JSON wrapper: compact JSON when they are JSON."""
    value = parse_json(text)
    return text if value is INVALID else compact(value)


# --- XML-style parameters --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class XmlCall:
    """Tags of a key/value call: `name_end` ends the name; each parameter is
    `key_open KEY key_close [value_open] VALUE value_close`; `call_close` ends the call."""

    name_end: tuple[str, ...]
    key_open: str
    key_close: str
    value_close: str
    call_close: str
    value_open: str = ""
    name_prefix: str = ""  # text before the name to skip (`<function=` after `<tool_call>`)
    # The key tag's attributes after the name (`city" string="true` of DeepSeek's DSML): the key,
    # and whether the value is plain text (True), JSON (False) or as the schema says (None).
    key_attrs: Callable[[str], tuple[str, bool | None]] | None = None
    cdata: bool = False  # a value may be wrapped in `<![CDATA[…]]>` (MiniCPM 5)
    # MiniMax M3: each value closes with its key's own tag, a value is text when its schema may be
    # a string, and other values are read (from their text, as their schema shapes them) here.
    value_close_for: Callable[[str], str] | None = None
    is_text: Callable[[Any], bool] | None = None
    read_value: Callable[[Any, str], str] | None = None  # (schema, text) -> JSON text


def markup_value(text: str) -> Any:
    """A value written between tags: JSON when it is JSON, else its text less the newlines
    that wrap it."""
    value = parse_json(text.strip()) if text.strip() else INVALID
    if value is not INVALID:
        return value
    if text.startswith("\n"):
        text = text[1:-1] if text.endswith("\n") and len(text) > 1 else text[1:]
    return text


_CDATA = "<![CDATA["


def _param_types(tools: Tools, name: str) -> dict[str, Any]:
    schema = tools.get(name) or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _is_string(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    return schema.get("type") == "string"


class XmlCallReader:
    """Streams the arguments object as it is built: `{"key": ` at each key, a string value's
    characters as they come (when the tool's schema says string), other values when they close."""

    def __init__(self, spec: XmlCall, tools: Tools) -> None:
        self._spec = spec
        self._tools = tools
        self._buf = ""
        self._state = "prefix" if spec.name_prefix else "name"
        self._types: dict[str, Any] = {}
        self._first = True
        self._stream = False  # the current value streams as a JSON string
        self._value_started = False
        self._ws = ""  # a streamed value's last newline, held back: it may be the markup's
        self._newline = False  # the value began with a newline (so its last one is markup too)
        self._opened = False
        self._close = spec.value_close  # the current value's closing tag
        self._schema: Any = None  # the current value's schema

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        spec = self._spec
        while True:
            state = self._state
            if state == "prefix":
                head = self._buf.lstrip()
                if not head or (spec.name_prefix.startswith(head) and head != spec.name_prefix):
                    return None
                if not head.startswith(spec.name_prefix):
                    out.call(*broken_call(head))
                    self._buf = ""
                    self._state = "done"
                    continue
                self._buf = head[len(spec.name_prefix) :]
                self._state = "name"
            elif state == "name":
                found = [(i, m) for m in spec.name_end if (i := self._buf.find(m)) != -1]
                if not found:
                    return None
                at, marker = min(found)
                name = self._buf[:at].strip()
                self._buf = self._buf[
                    at + (0 if marker in (spec.key_open, spec.call_close) else len(marker)) :
                ]
                self._types = _param_types(self._tools, name)
                out.call(name, "{")
                self._opened = True
                self._state = "params"
            elif state == "params":
                head = self._buf.lstrip()
                self._buf = head
                if not head:
                    return None
                if head.startswith(spec.call_close):
                    out.args("}")
                    self._opened = False
                    self._buf = head[len(spec.call_close) :]
                    self._state = "done"
                elif spec.call_close.startswith(head):
                    return None  # (M3's key tag begins like its call's closing tag)
                elif head.startswith(spec.key_open):
                    self._buf = head[len(spec.key_open) :]
                    self._state = "key"
                elif spec.call_close.startswith(head) or spec.key_open.startswith(head):
                    return None
                else:  # stray text between parameters: skip to what may be the next tag
                    starts = [
                        j for c in {spec.key_open[0], spec.call_close[0]} if (j := head.find(c, 1)) != -1
                    ]
                    i = min(starts, default=-1)
                    if i == -1:
                        self._buf = ""
                        return None
                    self._buf = head[i:]
            elif state == "key":
                i = self._buf.find(spec.key_close)
                if i == -1:
                    return None
                key = self._buf[:i].strip()
                self._buf = self._buf[i + len(spec.key_close) :]
                plain = None
                if spec.key_attrs is not None:
                    key, plain = spec.key_attrs(key)
                out.args(("" if self._first else ",") + compact(key) + ":")
                self._first = False
                schema = self._types.get(key)
                self._schema = schema
                if plain is None:
                    plain = spec.is_text(schema) if spec.is_text is not None else _is_string(schema)
                self._stream = plain
                self._value_started = False
                self._newline = False
                self._ws = ""
                self._close = spec.value_close_for(key) if spec.value_close_for else spec.value_close
                self._state = "value_open" if spec.value_open else ("cdata" if spec.cdata else "value")
            elif state == "cdata":
                if len(self._buf) < len(_CDATA) and _CDATA.startswith(self._buf):
                    return None
                if self._buf.startswith(_CDATA):
                    self._buf = self._buf[len(_CDATA) :]
                    self._close = "]]>" + spec.value_close
                self._state = "value"
            elif state == "value_open":
                head = self._buf.lstrip()
                if len(head) < len(spec.value_open) and spec.value_open.startswith(head):
                    return None
                self._buf = head[len(spec.value_open) :] if head.startswith(spec.value_open) else head
                self._state = "value"
            elif state == "value":
                close = self._close
                i = self._buf.find(close)
                if not self._stream:
                    if i == -1:
                        return None
                    raw = self._buf[:i]
                    read = spec.read_value
                    out.args(read(self._schema, raw) if read else compact(markup_value(raw)))
                else:
                    if i == -1:
                        held = held_from(self._buf, (close,), close[0])
                        self._stream_piece(self._buf[:held], out)
                        self._buf = self._buf[held:]
                        return None
                    self._stream_piece(self._buf[:i], out)
                    if not self._newline:
                        out.args(quoted_piece(self._ws))  # held back, and not the closing newline
                    out.args("" if self._value_started else '"')
                    out.args('"')
                self._buf = self._buf[i + len(close) :]
                self._state = "params"
            else:  # done
                rest, self._buf = self._buf, ""
                return rest

    def _stream_piece(self, text: str, out: CallOut) -> None:
        """A string value's text; a newline right after the key's tag and the one before the
        value's closing tag are the markup's, not the value's (llama.cpp's reading)."""
        if not text:
            return
        if not self._value_started:
            out.args('"')
            self._value_started = True
            if text.startswith("\n"):
                self._newline = True
                text = text[1:]
        text = self._ws + text
        body = text[:-1] if text.endswith("\n") else text
        self._ws = text[len(body) :]
        out.args(quoted_piece(body))

    def close(self, out: CallOut) -> None:
        if self._state == "name" and self._buf.strip():
            out.call(self._buf.strip(), "")
        elif self._state == "value" and not self._stream:
            out.args(compact(self._buf.strip()))  # an unterminated value: the object stays open


# --- whole calls converted at the end --------------------------------------------------------


class BufferedReader:
    """Everything up to `close`, turned into calls at once by `convert` (name, arguments)s."""

    def __init__(self, close: str, convert: Callable[[str], list[tuple[str, str]] | None]) -> None:
        self._close = close
        self._convert = convert
        self._buf = ""

    def feed(self, text: str, out: CallOut) -> str | None:
        start = max(0, len(self._buf) - len(self._close) + 1)  # searched before
        self._buf += text
        i = self._buf.find(self._close, start)
        if i == -1:
            return None
        self._emit(self._buf[:i], out)
        return self._buf[i + len(self._close) :]

    def _emit(self, raw: str, out: CallOut) -> None:
        calls = self._convert(raw)
        if calls is None:
            out.call(*broken_call(raw))
            return
        for name, args in calls:
            out.call(name, args)

    def close(self, out: CallOut) -> None:
        if self._buf.strip():
            out.call(*broken_call(self._buf))


__all__ = [
    "BufferedReader",
    "JsonCallsReader",
    "NameJson",
    "NameJsonReader",
    "XmlCall",
    "XmlCallReader",
    "json_text",
    "markup_value",
]
