"""Helpers for the parsing tests against llama.cpp's chat-template corpus (found through
llamacpp_sources, which fetches llama-cpp-python's sdist once), and a parser's events folded
into a message."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from llamacpp_sources import SourcesUnavailable, llama_cpp_tree
from sluicegate.core.events import ItemKind, RawEvent, TextDelta, ToolCallDelta


@lru_cache(maxsize=1)
def templates_dir() -> Path | None:
    """The corpus directory (`LLAMA_CPP_TEMPLATES`, or llamacpp_sources' cached sdist), or None
    when it cannot be had (no network, no pip)."""
    given = os.environ.get("LLAMA_CPP_TEMPLATES")
    if given:
        return Path(given)
    try:
        return llama_cpp_tree() / "models" / "templates"
    except SourcesUnavailable:
        return None


def fold(events: list[RawEvent]) -> dict[str, Any]:
    text = {ItemKind.MESSAGE: "", ItemKind.REASONING: ""}
    calls: list[dict[str, str]] = []
    for event in events:
        if isinstance(event, TextDelta):
            text[event.channel] += event.text
        elif isinstance(event, ToolCallDelta):
            while len(calls) <= event.index:
                calls.append({"name": "", "arguments": ""})
            if event.name is not None:
                calls[event.index]["name"] = event.name
            calls[event.index]["arguments"] += event.arguments
    return {"content": text[ItemKind.MESSAGE], "reasoning": text[ItemKind.REASONING], "tool_calls": calls}
