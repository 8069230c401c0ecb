"""The streaming output parser: model text in arbitrary chunks → reasoning, message text and
tool calls, as raw events.

Text streams through with at most a tag's length of delay: only a suffix that could be the
start of a tag is held back until the next chunk decides. Everything inside tool-call markup is
buffered until the call is complete and leaves as one `ToolCallDelta` (name, fresh call id,
arguments as JSON text), except a Llama 3 call that starts with its name
(`{"name": "f", "parameters": {`), whose arguments then stream as they are written. Whatever the model writes, nothing raises and no markup reaches the
message text: a broken call still becomes a call, which the dialects report as invalid.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum, auto

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, TokenLogprob, ToolCallDelta
from sluicegate.core.ids import new_id
from sluicegate.parsing.calls import (
    INVALID,
    arguments_text,
    broken_call,
    call_from_object,
    name_in,
    parse_json,
)
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import JsonArgs, json_or_text
from sluicegate.parsing.scan import JsonScanner, QuoteTracker, held_from

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS = "[TOOL_CALLS]"
MISTRAL_ARGS = "[ARGS]"
MISTRAL_CALL_ID = "[CALL_ID]"
_SEPARATORS = " \t\r\n;"  # between Llama 3 JSON calls
# A Llama 3 call that names itself first: its arguments object can stream from here.
_LLAMA_HEAD = re.compile(
    r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
    r'"(?:parameters|arguments)"\s*:\s*(?=\{)'
)


def new_call_id() -> str:
    return new_id("call_", 24)


class Calls(Enum):
    """The call markup this parser reads (the families' declarations pick one)."""

    NONE = auto()
    TAGGED = auto()  # <tool_call>{"name": ..., "arguments": ...}</tool_call>
    JSON_MESSAGE = auto()  # the message is {"name": ..., "parameters": ...} (maybe after <|python_tag|>)
    TOOL_CALLS_TOKEN = auto()  # [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...}


class _Mode(Enum):
    TEXT = auto()  # reasoning or message text, watching for markers
    HERMES_CALL = auto()  # inside <tool_call>, until </tool_call>
    LLAMA_CALL = auto()  # a JSON object at the message start, until it closes
    LLAMA_ARGS = auto()  # a Llama 3 call's arguments object, streamed
    LLAMA_END = auto()  # the rest of a Llama 3 call's object after its arguments
    LLAMA_NEXT = auto()  # after a Llama 3 call: another one, or text
    MISTRAL_OPEN = auto()  # after [TOOL_CALLS]: an array, or name[ARGS]{...}
    MISTRAL_ARRAY = auto()  # [TOOL_CALLS][{...}, ...], until the array closes
    MISTRAL_NAME = auto()  # [TOOL_CALLS]name, until [ARGS]
    MISTRAL_ARGS = auto()  # [ARGS]{...}, until the object closes


# Module constants for the per-token path: an enum member lookup costs ~100 ns in Python 3.11.
_TEXT = _Mode.TEXT
_MESSAGE = ItemKind.MESSAGE


class OutputParser:
    """One generation's text → raw events. Feed chunks as they come; call `finish` once."""

    def __init__(
        self,
        *,
        calls: Calls = Calls.NONE,
        reasoning: ReasoningStyle | None = None,
        starts_in_reasoning: bool = False,
        new_call_id: Callable[[], str] = new_call_id,
    ) -> None:
        self.saw_tool_calls = False
        self._format = calls
        self._reasoning = reasoning
        self._new_call_id = new_call_id
        in_reasoning = reasoning is not None and starts_in_reasoning
        self._channel = ItemKind.REASONING if in_reasoning else ItemKind.MESSAGE
        self._mode = _Mode.TEXT
        self._buf = ""
        self._at_start = True  # no message text and no call yet
        self._trim = False  # drop whitespace that starts the message (after </think>, a call)
        self._ws = ""  # message whitespace held back: it may only precede a call or reasoning
        self._hold_ws = calls is not Calls.NONE
        self._logprobs: list[TokenLogprob] | None = None
        self._calls = 0
        self._json = JsonScanner()
        self._quotes = QuoteTracker()
        self._json_body: bool | None = None  # whether a Hermes call's body is JSON (quotes count)
        self._searched = 0  # how far the buffer was searched for a closing tag
        self._name = ""  # a Mistral call's name, while its arguments arrive
        self._args = JsonArgs()  # a Llama 3 call's arguments, streamed
        self._markers: tuple[str, ...] = ()
        self._triggers = ""
        self._llama_start = False
        self._refresh()

    # --- public --------------------------------------------------------------------------

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        if (  # per token, mid-message with nothing held: text without a marker passes through
            not logprobs
            and self._mode is _TEXT
            and self._channel is _MESSAGE
            and not (self._buf or self._at_start or self._trim or self._ws or self._hold_ws)
            and not (self._llama_start or self._logprobs)
        ):
            for c in self._triggers:
                if c in text:
                    break
            else:
                return [TextDelta(_MESSAGE, text)] if text else []
        out: list[RawEvent] = []
        if logprobs:
            if self._logprobs is None:
                self._logprobs = list(logprobs)
            else:
                self._logprobs.extend(logprobs)
        if self._mode is _Mode.TEXT and not self._buf and not self._llama_start:
            for c in self._triggers:
                if c in text:
                    break
            else:  # the per-token fast path: no markup in sight
                self._emit_text(text, out)
                return out
        self._buf += text
        while self._buf and self._step(out):
            pass
        return out

    def finish(self) -> list[RawEvent]:
        """Flush at the end of generation: held text is text, an unfinished call still a call."""
        out: list[RawEvent] = []
        buf, self._buf = self._buf, ""
        match self._mode:
            case _Mode.TEXT:
                self._emit_text(buf, out)
            case _Mode.HERMES_CALL:
                self._json_calls(buf[: held_from(buf, (HERMES_CLOSE,), "<")], out)
            case _Mode.LLAMA_CALL:
                if name_in(buf) is not None:
                    self._emit_call(*broken_call(buf), out)
                else:
                    self._to_text()
                    self._emit_text(buf, out)
            case _Mode.MISTRAL_OPEN:
                self._emit_call("", "", out)
            case _Mode.MISTRAL_ARRAY:
                self._emit_call(*broken_call(buf), out)
            case _Mode.MISTRAL_NAME:
                name = buf[: held_from(buf, (MISTRAL_ARGS, MISTRAL_CALL_ID), "[")]
                self._emit_call(name.split(MISTRAL_CALL_ID)[0].strip(), "", out)
            case _Mode.MISTRAL_ARGS:
                self._emit_call(self._name, buf.strip(), out)
            case _Mode.LLAMA_NEXT | _Mode.LLAMA_ARGS | _Mode.LLAMA_END:
                pass  # separators, a partial <|python_tag|>, a cut-off call's arguments (left)
        self._mode = _Mode.TEXT
        if self._ws and not self._at_start:
            out.append(TextDelta(ItemKind.MESSAGE, self._ws, self._take_logprobs()))
        self._ws = ""
        return out

    # --- state ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        """The markers that mean something in the current channel and position."""
        markers: list[str] = []
        if self._channel is ItemKind.REASONING:
            assert self._reasoning is not None
            markers.append(self._reasoning.close_tag)
        else:
            if self._reasoning is not None and self._at_start:
                markers.append(self._reasoning.open_tag)
            if self._format is Calls.TAGGED:
                markers.append(HERMES_OPEN)
            elif self._format is Calls.TOOL_CALLS_TOKEN:
                markers.append(MISTRAL_CALLS)
        self._markers = tuple(markers)
        self._triggers = "".join({m[0] for m in markers})
        # Llama 3 calls are JSON at the message start: until then every chunk is looked at.
        self._llama_start = (
            self._format is Calls.JSON_MESSAGE and self._at_start and self._channel is ItemKind.MESSAGE
        )

    def _to_text(self) -> None:
        self._mode = _Mode.TEXT
        self._refresh()

    def _start(self, mode: _Mode) -> None:
        """Enter tool-call markup: whitespace and logprobs before it go with it."""
        self._mode = mode
        self._ws = ""
        self._logprobs = None
        self._json = JsonScanner()
        self._quotes = QuoteTracker()
        self._json_body = None
        self._searched = 0

    def _take_logprobs(self) -> list[TokenLogprob] | None:
        logprobs, self._logprobs = self._logprobs, None
        return logprobs

    # --- output --------------------------------------------------------------------------

    def _emit_text(self, text: str, out: list[RawEvent]) -> None:
        if not text:
            return
        if self._channel is ItemKind.REASONING:
            out.append(TextDelta(ItemKind.REASONING, text, self._take_logprobs()))
            return
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        if self._ws:
            text, self._ws = self._ws + text, ""
        if self._hold_ws or self._at_start:
            body = text.rstrip() if self._hold_ws else ("" if text.isspace() else text)
            self._ws = text[len(body) :]
            if not body:
                return
            text = body
        out.append(TextDelta(ItemKind.MESSAGE, text, self._take_logprobs()))
        if self._at_start:
            self._at_start = False
            self._refresh()

    def _emit_call(self, name: str, arguments: str, out: list[RawEvent]) -> None:
        self._ws = ""
        self._logprobs = None
        out.append(
            ToolCallDelta(index=self._calls, arguments=arguments, call_id=self._new_call_id(), name=name)
        )
        self._calls += 1
        self.saw_tool_calls = True
        self._trim = True
        self._at_start = False
        self._refresh()

    def _json_calls(self, raw: str, out: list[RawEvent]) -> None:
        """The calls in a Hermes body or a Mistral array: one object or a list of them."""
        value = parse_json(raw)
        items = value if isinstance(value, list) and value else [value]
        for item in items:
            call = None if item is INVALID else call_from_object(item, strict=False)
            if call is None:
                call = broken_call(raw if item is INVALID or len(items) == 1 else arguments_text(item))
            self._emit_call(*call, out)

    # --- steps: each consumes from the buffer; True when the next one may make progress ----

    def _step(self, out: list[RawEvent]) -> bool:
        match self._mode:
            case _Mode.TEXT:
                return self._step_text(out)
            case _Mode.HERMES_CALL:
                return self._step_hermes(out)
            case _Mode.LLAMA_CALL | _Mode.MISTRAL_ARRAY | _Mode.MISTRAL_ARGS:
                return self._step_json(out)
            case _Mode.LLAMA_ARGS:
                return self._step_llama_args(out)
            case _Mode.LLAMA_END:
                return self._step_llama_end()
            case _Mode.LLAMA_NEXT:
                return self._step_llama_next()
            case _Mode.MISTRAL_OPEN:
                return self._step_mistral_open()
            case _Mode.MISTRAL_NAME:
                return self._step_mistral_name()

    def _step_text(self, out: list[RawEvent]) -> bool:
        buf = self._buf
        if self._llama_start:
            head = buf.lstrip()
            if head.startswith(PYTHON_TAG):
                self._buf = head[len(PYTHON_TAG) :]
                return True
            if not head or PYTHON_TAG.startswith(head):
                return False  # whitespace or a partial <|python_tag|>: wait and see
            if head[0] == "{":
                self._buf = head
                self._start(_Mode.LLAMA_CALL)
                return True
        markers = self._markers
        if not markers:
            self._buf = ""
            self._emit_text(buf, out)
            return False
        at, found = len(buf), ""
        for marker in markers:
            i = buf.find(marker, 0, at + len(marker))
            if i != -1 and i < at:
                at, found = i, marker
        if not found:
            held = held_from(buf, markers, self._triggers)
            self._buf = buf[held:]
            self._emit_text(buf[:held], out)
            return False
        self._buf = buf[at:]
        self._emit_text(buf[:at], out)
        if self._markers is not markers:
            return True  # the text before it changed what the marker means (no longer at start)
        self._buf = buf[at + len(found) :]
        self._enter(found)
        return True

    def _enter(self, marker: str) -> None:
        reasoning = self._reasoning
        if reasoning is not None and self._channel is ItemKind.REASONING:
            self._channel = ItemKind.MESSAGE
            self._trim = True
        elif reasoning is not None and marker == reasoning.open_tag:
            self._channel = ItemKind.REASONING
            self._ws = ""
        elif marker == HERMES_OPEN:
            self._start(_Mode.HERMES_CALL)
        else:
            self._start(_Mode.MISTRAL_OPEN)
        self._refresh()

    def _step_hermes(self, out: list[RawEvent]) -> bool:
        buf = self._buf
        if self._json_body is None:
            head = buf.lstrip()[:1]
            if not head:
                return False
            self._json_body = head in "{["
        while True:
            end = buf.find(HERMES_CLOSE, self._searched)
            if end == -1:
                self._searched = max(self._searched, len(buf) - len(HERMES_CLOSE) + 1)
                return False
            if not (self._json_body and self._quotes.inside_at(buf, end)):
                break
            self._searched = end + 1  # inside a JSON string: part of an argument
        self._buf = buf[end + len(HERMES_CLOSE) :]
        self._json_calls(buf[:end], out)
        self._to_text()
        return True

    def _step_json(self, out: list[RawEvent]) -> bool:
        buf = self._buf
        if self._mode is _Mode.LLAMA_CALL and (head := _LLAMA_HEAD.match(buf)) is not None:
            name = json_or_text(f'"{head.group(1)}"')
            self._emit_call(name if isinstance(name, str) else head.group(1), "", out)
            self._buf = buf[head.end() :]
            self._args = JsonArgs()
            self._mode = _Mode.LLAMA_ARGS
            return True
        end = self._json.end(buf)
        if end is None:
            return False
        raw, self._buf = buf[:end], buf[end:]
        mode = self._mode
        if mode is _Mode.MISTRAL_ARRAY:
            self._json_calls(raw, out)
        elif mode is _Mode.MISTRAL_ARGS:
            value = parse_json(raw)
            self._emit_call(self._name, raw.strip() if value is INVALID else arguments_text(value), out)
        else:
            value = parse_json(raw)
            call = None if value is INVALID else call_from_object(value, strict=True)
            if call is None and value is INVALID and name_in(raw) is not None:
                call = broken_call(raw)
            if call is None:  # JSON, but not a call: the model answered in JSON
                self._to_text()
                self._emit_text(raw, out)
                return True
            self._emit_call(*call, out)
            self._mode = _Mode.LLAMA_NEXT
            return True
        self._to_text()
        return True

    def _step_llama_args(self, out: list[RawEvent]) -> bool:
        piece, rest = self._args.feed(self._buf)
        if piece:
            out.append(ToolCallDelta(index=self._calls - 1, arguments=piece))
        if rest is None:
            self._buf = ""
            return False
        self._buf = rest
        self._json = JsonScanner()
        self._json.depth = 1  # inside the call's object, after its arguments
        self._mode = _Mode.LLAMA_END
        return True

    def _step_llama_end(self) -> bool:
        end = self._json.end(self._buf)
        if end is None:
            return False
        self._buf = self._buf[end:]
        self._mode = _Mode.LLAMA_NEXT
        return True

    def _step_llama_next(self) -> bool:
        head = self._buf.lstrip(_SEPARATORS)
        self._buf = head
        if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
            return False
        if head.startswith(PYTHON_TAG):
            self._buf = head[len(PYTHON_TAG) :]
        elif head[0] == "{":
            self._start(_Mode.LLAMA_CALL)
        else:
            self._to_text()
        return True

    def _step_mistral_open(self) -> bool:
        head = self._buf.lstrip()
        self._buf = head
        if not head:
            return False
        self._start(_Mode.MISTRAL_ARRAY if head[0] == "[" else _Mode.MISTRAL_NAME)
        return True

    def _step_mistral_name(self) -> bool:
        buf = self._buf
        end = buf.find(MISTRAL_ARGS, self._searched)
        if end == -1:
            self._searched = max(0, len(buf) - len(MISTRAL_ARGS) + 1)
            return False
        self._name = buf[:end].split(MISTRAL_CALL_ID)[0].strip()
        self._buf = buf[end + len(MISTRAL_ARGS) :].lstrip()
        self._start(_Mode.MISTRAL_ARGS)
        return True
