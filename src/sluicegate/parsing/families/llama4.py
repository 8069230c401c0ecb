"""Llama 4's pythonic calls: the message is a list of Python calls, maybe wrapped in
`<|python_start|>` … `<|python_end|>`:

[get_weather(city="Paris", unit="celsius"), get_time(city="Paris")]

A message that starts like a call list (`[name(`) is the calls, read by LFM2's reader of Python
calls, so the keyword arguments stream as JSON while they are written. Any other message is read
as Llama 3's (Meta's own Llama 4 template renders past calls as Llama 3's JSON objects): a
`{"name": …, "parameters": …}` message is a call, the rest text.
"""

from __future__ import annotations

import re

from sluicegate.core.events import RawEvent, TokenLogprob
from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser
from sluicegate.parsing.families.legacy import json_message_parser
from sluicegate.parsing.families.lfm2 import PythonCallsReader
from sluicegate.parsing.forced import PythonCall
from sluicegate.parsing.markup import CallOut, Reader
from sluicegate.parsing.scan import held_from

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
_CALLS = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_MAYBE = re.compile(r"\[\s*[A-Za-z_\w.]*\Z")  # could still become `[name(`


class UntilEnd:
    """`reader` up to `<|python_end|>` (held back while it may be arriving), then the rest."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._held = ""

    def feed(self, text: str, out: CallOut) -> str | None:
        buf, self._held = self._held + text, ""
        i = buf.find(PYTHON_END)
        if i != -1:
            self._reader.feed(buf[:i], out)
            self._reader.close(out)
            return buf[i + len(PYTHON_END) :]
        keep = held_from(buf, (PYTHON_END,), "<")
        self._held = buf[keep:]
        self._reader.feed(buf[:keep], out)
        return None

    def close(self, out: CallOut) -> None:
        self._reader.feed(self._held, out)
        self._reader.close(out)


class PythonicParser:
    """`[name(...), ...]` (maybe in `<|python_start|>`) as the whole message, else Llama 3's."""

    def __init__(self, args: ParserArgs) -> None:
        self.saw_tool_calls = False
        self._out = CallOut(args.new_call_id)
        self._text = json_message_parser(args)
        self._calls: UntilEnd | None = None
        self._buf = ""
        self._mode = "start"  # start | calls | text

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        if self._mode == "text":
            return self._forward(self._text.feed(text, logprobs))
        if self._mode == "calls":
            return self._read(text)
        self._buf += text
        head = self._buf.lstrip()
        if head.startswith(PYTHON_START):
            head = self._buf = head[len(PYTHON_START) :].lstrip()
        if not head or _MAYBE.match(head) or PYTHON_START.startswith(head):
            return []
        buf, self._buf = self._buf, ""
        if _CALLS.match(head):
            self._mode = "calls"
            self._calls = UntilEnd(PythonCallsReader())
            return self._read(head)
        self._mode = "text"
        return self._forward(self._text.feed(buf, logprobs))

    def finish(self) -> list[RawEvent]:
        if self._calls is not None:
            self._calls.close(self._out)
            return self._take()
        buf, self._buf = self._buf, ""
        return self._forward([*self._text.feed(buf), *self._text.finish()] if buf else self._text.finish())

    def _read(self, text: str) -> list[RawEvent]:
        assert self._calls is not None
        rest = self._calls.feed(text, self._out)
        events = self._take()
        if rest is not None:  # `<|python_end|>` closed the calls: what follows is text
            self._calls, self._mode = None, "text"
            events += self._forward(self._text.feed(rest))
        return events

    def _take(self) -> list[RawEvent]:
        events, self._out.events = self._out.events, []
        if events:
            self.saw_tool_calls = True
        return events

    def _forward(self, events: list[RawEvent]) -> list[RawEvent]:
        self.saw_tool_calls = self.saw_tool_calls or self._text.saw_tool_calls
        return events


def _build(args: ParserArgs) -> StreamParser:
    return PythonicParser(args)


LLAMA4_PYTHONIC = Family(
    "llama4_pythonic",
    lambda s: "<|header_start|>" in s,
    _build,
    call=PythonCall("", ""),
)
