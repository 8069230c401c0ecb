"""Llama 4's pythonic calls: the message is a list of Python calls, maybe wrapped in
`<|python_start|>` … `<|python_end|>`:

[get_weather(city="Paris", unit="celsius"), get_time(city="Paris")]

A message that starts like a call list (`[name(`) is read whole when the output ends (a call's
values are Python literals: they are JSON only once the list is complete).
"""

from __future__ import annotations

import re

from sluicegate.core.events import RawEvent, TokenLogprob
from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser
from sluicegate.parsing.families.lfm2 import python_calls
from sluicegate.parsing.markup import CallOut, Markup, MarkupParser
from sluicegate.parsing.readers import BufferedReader

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
_CALLS = re.compile(r"\[\s*([A-Za-z_][\w.]*)\s*\(")
_MAYBE = re.compile(r"\[\s*[A-Za-z_\w.]*\Z|\[\Z")  # could still become `[name(`
_MARKUP = Markup(calls=((PYTHON_START, lambda tools: BufferedReader(PYTHON_END, python_calls)),))


class PythonicParser:
    """`[name(...), ...]` as the whole message, else text (and `<|python_start|>` calls)."""

    def __init__(self, args: ParserArgs) -> None:
        self.saw_tool_calls = False
        self._out = CallOut(args.new_call_id)
        self._text = MarkupParser(
            _MARKUP, reasoning=None, starts_in_reasoning=False, tools=args.tools, new_call_id=args.new_call_id
        )
        self._buf = ""
        self._mode = "start"  # start | calls | text

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        if self._mode == "text":
            return self._forward(self._text.feed(text, logprobs))
        self._buf += text
        if self._mode == "start":
            head = self._buf.lstrip()
            if not head or _MAYBE.match(head):
                return []
            if _CALLS.match(head):
                self._mode = "calls"
                return []
            self._mode = "text"
            buf, self._buf = self._buf, ""
            return self._forward(self._text.feed(buf, logprobs))
        return []

    def finish(self) -> list[RawEvent]:
        if self._mode != "calls":
            buf, self._buf = self._buf, ""
            return self._forward(
                [*self._text.feed(buf), *self._text.finish()] if buf else self._text.finish()
            )
        raw = self._buf.strip().removeprefix(PYTHON_START).removesuffix(PYTHON_END)
        calls = python_calls(raw)
        if calls is None:  # cut off or not Python: one invalid call
            m = _CALLS.match(raw)
            calls = [(m.group(1) if m else "", raw)]
        for name, arguments in calls:
            self._out.call(name, arguments)
        self.saw_tool_calls = True
        events, self._out.events = self._out.events, []
        return events

    def _forward(self, events: list[RawEvent]) -> list[RawEvent]:
        self.saw_tool_calls = self._text.saw_tool_calls
        return events


def _build(args: ParserArgs) -> StreamParser:
    return PythonicParser(args)


LLAMA4_PYTHONIC = Family("llama4_pythonic", lambda s: "<|header_start|>" in s, _build)
