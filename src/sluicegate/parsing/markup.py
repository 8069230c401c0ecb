"""The streaming output parser, one for every family: model text in arbitrary chunks →
reasoning, message text and tool calls, as raw events. A family describes its markup
(`Markup`): reasoning tags, tokens that open a tool call (each handing the text to a `Reader`
of that family's call syntax until the call ends), a reader for a message that opens with a
call (Llama 3's JSON), and special tokens that are dropped.

Text streams through with at most a marker's length of delay (a suffix that could begin a
marker is held back). A reader emits a call's name as soon as it is known and its arguments as
they are written, where the syntax allows. Whatever the model writes, nothing raises and no
markup reaches the message: a broken or cut-off call is still a call, whose arguments are not
valid JSON, which the dialects report as an invalid call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, TokenLogprob, ToolCallDelta
from sluicegate.core.ids import new_id
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.scan import held_from

_MESSAGE = ItemKind.MESSAGE
_REASONING = ItemKind.REASONING


def new_call_id() -> str:
    return new_id("call_", 24)


class CallOut:
    """Where readers put calls: a name (opening one), argument pieces, in order."""

    __slots__ = ("count", "events", "new_call_id")

    def __init__(self, new_call_id: Callable[[], str]) -> None:
        self.new_call_id = new_call_id
        self.events: list[RawEvent] = []
        self.count = 0

    def begin(self, name: str) -> None:
        self.events.append(ToolCallDelta(self.count, "", self.new_call_id(), name))
        self.count += 1

    def args(self, text: str) -> None:
        if text:
            self.events.append(ToolCallDelta(self.count - 1, text))

    def call(self, name: str, arguments: str) -> None:
        self.begin(name)
        self.args(arguments)


class Reader(Protocol):
    """One tool call's (or call section's) text after its opening marker."""

    def feed(self, text: str, out: CallOut) -> str | None:
        """Consume `text`; the text after the call's end, or None while the call goes on."""

    def close(self, out: CallOut) -> str | None:
        """The output ended inside the call: emit what there is (a cut-off call), or hand back
        what was no call after all as text."""


ReaderFactory = Callable[["Tools"], Reader]
Tools = dict[str, dict[str, object]]  # tool name -> its parameters' JSON schema


@dataclass(frozen=True, slots=True)
class Markup:
    """A family's markup: `calls` maps an opening marker to the reader of what follows it;
    `drop` are tokens removed wherever they appear in message text. `leading`: the reader of a
    message that opens with `{` (Llama 3's JSON calls), maybe after the token `lead_in`."""

    calls: tuple[tuple[str, ReaderFactory], ...] = ()
    drop: tuple[str, ...] = ()
    starts_with: str = ""  # text the output is read as if preceded by (Functionary's `>>>`)
    calls_end_reasoning: bool = False  # a call's marker closes an unclosed reasoning block
    leading: ReaderFactory | None = None
    lead_in: str = ""


NO_MARKUP = Markup()  # reasoning tags at most

# What a parser derives from its markup (its openers by marker, the markers it drops, both
# markers in order), derived once per markup object, not per stream: a family's markup is a
# module constant. Keyed by identity (a frozen dataclass's hash is Python run per call); the
# entry holds the markup, so its id is not reused while it is there; bounded all the same.
_Derived = tuple[Markup, dict[str, ReaderFactory], frozenset[str], tuple[str, ...]]
_derived: dict[int, _Derived] = {}
_MAX_DERIVED = 256


def _derive(markup: Markup) -> _Derived:
    entry = _derived.get(id(markup))
    if entry is not None and entry[0] is markup:
        return entry
    openers, drop = dict(markup.calls), frozenset(markup.drop)
    entry = (markup, openers, drop, (*openers, *drop))
    if len(_derived) >= _MAX_DERIVED:
        _derived.clear()
    _derived[id(markup)] = entry
    return entry


def _triggers(markers: tuple[str, ...]) -> str:
    """Each marker's first character, once (the per-token check looks for any of them)."""
    if len(markers) == 1:
        return markers[0][0]
    return "".join({m[0] for m in markers})


class OutputParser:
    """One generation's text → raw events. Feed chunks as they come; call `finish` once."""

    def __init__(
        self,
        markup: Markup = NO_MARKUP,
        *,
        reasoning: ReasoningStyle | None = None,
        starts_in_reasoning: bool = False,
        tools: Tools | None = None,
        new_call_id: Callable[[], str] = new_call_id,
        continues: bool = False,
    ) -> None:
        self.saw_tool_calls = False
        self._markup = markup
        _, self._openers, self._drop, self._marks = _derive(markup)
        self._reasoning = reasoning
        self._tools = tools or {}
        self._out = CallOut(new_call_id)
        self._channel = _REASONING if reasoning is not None and starts_in_reasoning else _MESSAGE
        self._reader: Reader | None = None
        self._buf = markup.starts_with
        self._at_start = True  # no message text, no call yet: reasoning may still open
        # Drop whitespace that starts a part (not a continued message's: it goes on as written).
        self._trim = self._channel is _REASONING and not continues
        self._ws = ""  # message whitespace held back: it may only precede a call
        # Whether trailing whitespace waits for what follows (only markup with calls needs it).
        self._hold_ws = bool(markup.calls) or markup.leading is not None
        # The message may still open with a call (`leading`): every chunk is looked at.
        self._leading = False
        self._leading_done = markup.leading is None
        self._logprobs: list[TokenLogprob] | None = None
        self._markers: tuple[str, ...] = ()
        self._triggers = ""
        self._refresh()

    # --- public --------------------------------------------------------------------------

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        if logprobs:
            self._logprobs = [*(self._logprobs or ()), *logprobs]
        out: list[RawEvent] = []
        if self._reader is None and not self._buf and not self._leading:
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
        """Flush at the end: held text is text, an unfinished call still a call."""
        out: list[RawEvent] = []
        buf, self._buf = self._buf, ""
        if self._reader is not None:
            text = self._reader.close(self._out)
            self._reader = None
            self._calls(out)
            if text:
                self._leading_done = True
                self._refresh()
                self._emit_text(text, out)
        else:
            self._emit_text(buf, out)
        if self._ws and not self._at_start and self._channel is _MESSAGE:
            out.append(TextDelta(_MESSAGE, self._ws, self._take_logprobs()))
        self._ws = ""
        return out

    # --- state ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        # (the markup's own markers derived once: `_derive`)
        markers: tuple[str, ...]
        if self._channel is _REASONING:
            assert self._reasoning is not None
            close = self._reasoning.close_tag
            markers = (close, *self._marks) if self._markup.calls_end_reasoning else (close,)
        elif self._reasoning is not None and self._at_start:
            markers = (self._reasoning.open_tag, *self._marks)
        else:
            markers = self._marks
        self._markers = markers
        self._triggers = _triggers(markers) if markers else ""
        self._leading = not self._leading_done and self._at_start and self._channel is _MESSAGE

    def _take_logprobs(self) -> list[TokenLogprob] | None:
        logprobs, self._logprobs = self._logprobs, None
        return logprobs

    # --- output --------------------------------------------------------------------------

    def _emit_text(self, text: str, out: list[RawEvent]) -> None:
        if not text:
            return
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        if self._channel is _REASONING:
            out.append(TextDelta(_REASONING, text, self._take_logprobs()))
            return
        if self._ws:
            text, self._ws = self._ws + text, ""
        # (without calls, only whitespace that would start the message waits for its text)
        body = text.rstrip() if self._hold_ws else "" if self._at_start and text.isspace() else text
        self._ws = text[len(body) :]
        if not body:
            return
        out.append(TextDelta(_MESSAGE, body, self._take_logprobs()))
        if self._at_start:
            self._at_start = False
            self._refresh()

    def _calls(self, out: list[RawEvent]) -> None:
        events = self._out.events
        if events:
            out.extend(events)
            events.clear()
            self._ws = ""
            self._logprobs = None
            self.saw_tool_calls = True
            self._trim = True
            if self._at_start:
                self._at_start = False
                self._refresh()

    # --- steps ---------------------------------------------------------------------------

    def _step(self, out: list[RawEvent]) -> bool:
        reader = self._reader
        if reader is not None:
            buf, self._buf = self._buf, ""
            rest = reader.feed(buf, self._out)
            self._calls(out)
            if rest is None:
                return False
            self._reader = None
            self._buf = rest
            if self._leading:  # after the leading calls (or JSON that was none): text
                self._leading_done = True
                self._refresh()
            return True
        if self._leading and (lead := self._step_leading()) is not None:
            return lead
        buf, markers = self._buf, self._markers
        if not markers:
            self._buf = ""
            self._emit_text(buf, out)
            return False
        at, found = len(buf), ""
        for marker in markers:
            i = buf.find(marker, 0, at + len(marker))
            if i != -1 and (i < at or (i == at and len(marker) > len(found))):
                at, found = i, marker
        if not found:
            held = held_from(buf, markers, self._triggers)
            self._buf = buf[held:]
            self._emit_text(buf[:held], out)
            return False
        tail = buf[at:]
        if any(len(m) > len(found) and m.startswith(tail) for m in markers):
            self._buf = tail  # the start of a longer marker (`<|channel>` of `<|channel>thought`)
            self._emit_text(buf[:at], out)
            return False
        before = buf[:at]
        if before.strip() and self._at_start and self._channel is _MESSAGE:
            self._buf = buf[at:]
            self._emit_text(before, out)  # no longer at the start: the marker may mean less
            return True
        self._emit_text(before, out)
        self._buf = buf[at + len(found) :]
        self._enter(found)
        return True

    def _step_leading(self) -> bool | None:
        """At the message's start: a `{` hands the text to the leading reader (None: not one)."""
        head, lead_in = self._buf.lstrip(), self._markup.lead_in
        if lead_in and head.startswith(lead_in):
            self._buf = head[len(lead_in) :]
            return True
        if not head or (lead_in and lead_in.startswith(head)):
            return False  # whitespace, or a partial lead-in token: wait and see
        if head[0] != "{":
            return None
        assert self._markup.leading is not None
        self._buf = head
        self._ws = ""
        self._logprobs = None
        self._reader = self._markup.leading(self._tools)
        return True

    def _enter(self, marker: str) -> None:
        reasoning = self._reasoning
        if reasoning is not None and self._channel is _REASONING:
            self._channel = _MESSAGE
            self._trim = True
            if marker in self._openers and marker != reasoning.close_tag:
                self._reader = self._openers[marker](self._tools)
        elif reasoning is not None and marker == reasoning.open_tag and self._at_start:
            self._channel = _REASONING
            self._ws = ""
        elif marker in self._openers:
            self._reader = self._openers[marker](self._tools)
        self._refresh()
