"""Helpers for the output-parser tests: deterministic call ids, chunkings, and a collapsed view
of the events (consecutive text on one channel joined) that does not depend on chunking."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, ToolCallDelta
from sluicegate.parsing import StreamParser, ToolCallFormat, new_parser

Out = tuple[Any, ...]


def make_parser(**kwargs: Any) -> StreamParser:
    """The engine's parser for `tool_format` (`new_parser`)."""
    counter = itertools.count()
    fmt = kwargs.pop("tool_format", ToolCallFormat.NONE)
    return new_parser(fmt, new_call_id=lambda: f"call_{next(counter)}", **kwargs)


def run(chunks: list[str], **kwargs: Any) -> list[RawEvent]:
    parser = make_parser(**kwargs)
    events: list[RawEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.finish())
    return events


def collapse(events: list[RawEvent]) -> list[Out]:
    """("reasoning"|"message", text) runs, and ("call", index, id, name, arguments)."""
    out: list[Out] = []
    for event in events:
        if isinstance(event, TextDelta):
            assert event.text, "no empty text deltas"
            if out and out[-1][0] == event.channel.value:
                out[-1] = (event.channel.value, out[-1][1] + event.text)
            else:
                out.append((event.channel.value, event.text))
        else:
            assert isinstance(event, ToolCallDelta)
            if event.call_id is None and out and out[-1][0] == "call" and out[-1][1] == event.index:
                out[-1] = (*out[-1][:4], out[-1][4] + event.arguments)  # a streamed piece
            else:
                out.append(("call", event.index, event.call_id, event.name, event.arguments))
    return out


def chunkings(text: str) -> Iterator[list[str]]:
    """Whole, one character at a time, every two-way split, and a few fixed irregular ones."""
    yield [text]
    yield list(text)
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    for size in (2, 3, 5, 7):
        yield [text[i : i + size] for i in range(0, len(text), size)]


def parse_all_ways(text: str, **kwargs: Any) -> list[Out]:
    """The collapsed result, asserting that every chunking gives the same one."""
    expected = collapse(run([text], **kwargs))
    for chunks in chunkings(text):
        assert collapse(run(chunks, **kwargs)) == expected, chunks
    return expected


R = ItemKind.REASONING.value
M = ItemKind.MESSAGE.value
