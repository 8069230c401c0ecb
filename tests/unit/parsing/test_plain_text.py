"""A text completion's output is text as it is: what the chat parser would hold back or drop
(leading whitespace, whitespace-only output, tool-call markup) all reaches the client."""

from __future__ import annotations

from sluicegate.core.events import ItemKind, TextDelta
from sluicegate.parsing import OutputParser, PlainText


def _text(parser: OutputParser | PlainText, chunks: list[str]) -> str:
    events = [e for c in chunks for e in parser.feed(c)] + parser.finish()
    assert all(isinstance(e, TextDelta) and e.channel is ItemKind.MESSAGE for e in events)
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_whitespace_and_markup_pass_through() -> None:
    chunks = ["\n", "    ", "<tool_call>", '{"name": "f"}', "</tool_call>"]
    assert _text(PlainText(), chunks) == "".join(chunks)
    assert not PlainText().saw_tool_calls


def test_whitespace_only_output_is_kept() -> None:
    assert _text(PlainText(), ["\n", "\n"]) == "\n\n"
    # What the chat parser does with it, and why a completion must not use it.
    assert _text(OutputParser(), ["\n", "\n"]) == ""
