"""gpt-oss's Harmony format: a reply is a run of messages, each a header and a body.

    <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{…}<|call|>

`analysis` is reasoning, `final` (and `commentary` without a recipient) the message, a body
addressed `to=functions.NAME` (in the header's role part or its channel part) a tool call whose
JSON arguments stream as they are written. Bodies for built-in recipients (`python`,
`browser.*`, `container.*`) are dropped: the server offers no such tools.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, TokenLogprob
from sluicegate.parsing.calls import broken_call
from sluicegate.parsing.jsonstream import JsonArgs
from sluicegate.parsing.markup import CallOut
from sluicegate.parsing.scan import held_from

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_BODY_MARKERS = (*ENDS, START, CHANNEL)
_RECIPIENT = re.compile(r"to=([^\s<]+)")
# What a header cut off before any of its tokens looks like: a role and a recipient, nothing else.
_CUT_HEADER = re.compile(r"\s*(?:assistant\s*)?to=[^\s<]*\s*")
_HEADER_LEADS = (START, CHANNEL, " to=", "to=", "assistant")


class HarmonyParser:
    def __init__(self, *, new_call_id: Callable[[], str], in_analysis: bool = False) -> None:
        self.saw_tool_calls = False
        self._out = CallOut(new_call_id)
        self._buf = ""
        # in_analysis: the prompt ends inside an analysis body (a continued message's reasoning).
        self._state = "text" if in_analysis else "header"  # header | text | call | skip
        self._channel = ItemKind.REASONING if in_analysis else ItemKind.MESSAGE
        self._trim = not in_analysis  # (a continued body goes on as it was)
        self._args = JsonArgs()
        self._raw = ""  # a call body that is not JSON
        self._said = False  # some text has left
        self._lead = ""  # whitespace before any text, held back
        self._logprobs: list[TokenLogprob] | None = None

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        if logprobs:
            self._logprobs = [*(self._logprobs or ()), *logprobs]
        self._buf += text
        out: list[RawEvent] = []
        while self._buf and self._step(out, final=False):
            pass
        return out

    def finish(self) -> list[RawEvent]:
        out: list[RawEvent] = []
        while self._buf and self._step(out, final=True):
            pass
        if self._state == "call" and self._raw:
            self._out.args(self._raw.strip())
        self._take_calls(out)
        return out

    def _take_calls(self, out: list[RawEvent]) -> None:
        if self._out.events:
            out.extend(self._out.events)
            self._out.events.clear()
            self.saw_tool_calls = True

    def _text(self, text: str, out: list[RawEvent]) -> None:
        if self._trim:
            text = text.lstrip()
            self._trim = not text
        if not self._said and text.isspace():
            self._lead += text  # whitespace alone is no message; before text it is kept
            return
        if text:
            text, self._lead, self._said = self._lead + text, "", True
            logprobs, self._logprobs = self._logprobs, None
            out.append(TextDelta(self._channel, text, logprobs))

    def _step(self, out: list[RawEvent], *, final: bool) -> bool:
        buf = self._buf
        if self._state == "header":
            head = buf.lstrip()
            if head and not any(head.startswith(x) or x.startswith(head) for x in _HEADER_LEADS):
                self._channel, self._state = ItemKind.MESSAGE, "text"  # no header: plain text
                self._trim = False
                return True
            i = buf.find(MESSAGE)
            if i == -1:
                if (
                    final
                    and not any(t in buf for t in (START, CHANNEL, CONSTRAIN))
                    and not _CUT_HEADER.fullmatch(buf)
                ):
                    self._channel, self._state, self._trim = ItemKind.MESSAGE, "text", False
                    return True  # text that only began like a header ("a…" of "assistant", "to=…")
                if final:
                    self._buf = ""  # a header cut off before its body: nothing was said
                return False
            self._open(buf[:i])
            self._buf = buf[i + len(MESSAGE) :]
            return True
        # a body: up to an end token (or a new header)
        at, found = len(buf), ""
        for marker in _BODY_MARKERS:
            j = buf.find(marker)
            if j != -1 and j < at:
                at, found = j, marker
        if not found and not final:
            at = held_from(buf, _BODY_MARKERS, "<")
        body, self._buf = buf[:at], buf[at + len(found) if found == START or found in ENDS else at :]
        self._body(body, out)
        if found:
            self._close_body(out)
            self._state = "header"
            return True
        return False

    def _open(self, header: str) -> None:
        channel = header.rsplit(CHANNEL, 1)[-1].split(CONSTRAIN)[0].split()
        name = channel[0] if channel else ""
        recipients = [r for r in _RECIPIENT.findall(header) if r != "assistant"]
        self._trim = True
        if recipients:
            recipient = recipients[-1]
            if recipient.startswith("functions."):
                self._out.begin(recipient[len("functions.") :])
                self._args = JsonArgs()
                self._raw = ""
                self._state = "call"
            else:
                self._state = "skip"
        elif name == "analysis":
            self._channel, self._state = ItemKind.REASONING, "text"
        else:
            self._channel, self._state = ItemKind.MESSAGE, "text"

    def _body(self, body: str, out: list[RawEvent]) -> None:
        if self._state == "text":
            self._text(body, out)
        elif self._state == "call" and body:
            if self._args.done:
                return
            if not self._args.started and not self._raw and not body.strip():
                return
            if self._raw or (not self._args.started and body.lstrip()[:1] not in '{["'):
                self._raw += body
                return
            piece, _ = self._args.feed(body)
            self._out.args(piece)
            self._take_calls(out)

    def _close_body(self, out: list[RawEvent]) -> None:
        if self._state == "call":
            if self._raw:
                self._out.args(broken_call(self._raw)[1])
            self._take_calls(out)


__all__ = ["HarmonyParser"]
