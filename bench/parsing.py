"""Benchmark: what the streaming output parser (parsing) costs per token.

Run from the repository root (venv active): `python bench/parsing.py`

Feeds token-sized chunks through `OutputParser` in several configurations and prints µs per
token and the ratio against a baseline that only builds the one `TextDelta` a token needs
(what an engine without a parser would do). Absolute numbers depend on the machine; compare
the ratios within one run.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from sluicegate.core.events import ItemKind, TextDelta
from sluicegate.parsing import THINK, OutputParser, ToolCallFormat


def per_token(chunks: list[str], **config: Any) -> float:
    parser = OutputParser(**config)
    start = time.perf_counter()
    for chunk in chunks:
        parser.feed(chunk)
    parser.finish()
    return (time.perf_counter() - start) / len(chunks)


def baseline(chunks: list[str]) -> float:
    start = time.perf_counter()
    for chunk in chunks:
        [TextDelta(ItemKind.MESSAGE, chunk, None)]  # the work being measured
    return (time.perf_counter() - start) / len(chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-token cost of the streaming output parser.")
    parser.add_argument("--tokens", type=int, default=200_000)
    tokens = parser.parse_args().tokens
    words = [" word"] * tokens
    code = [" a", " <", " b", "[i]", ";"] * (tokens // 5)
    argument = [' wo\\"rd'] * (tokens // 10)
    cases: list[tuple[str, list[str], dict[str, Any]]] = [
        ("plain text, no format", words, {}),
        ("plain text, hermes + think", words, {"tool_format": ToolCallFormat.HERMES, "reasoning": THINK}),
        ("plain text, mistral", words, {"tool_format": ToolCallFormat.MISTRAL}),
        ("reasoning text, think", ["<think>", *words], {"reasoning": THINK}),
        ("code full of < and [, hermes", code, {"tool_format": ToolCallFormat.HERMES}),
        (
            "one long hermes call argument",
            ['<tool_call>{"name": "w", "arguments": {"t": "', *argument, '"}}</tool_call>'],
            {"tool_format": ToolCallFormat.HERMES},
        ),
        (
            "one long llama3 call argument",
            ['{"name": "w", "parameters": {"t": "', *argument, '"}}'],
            {"tool_format": ToolCallFormat.LLAMA3_JSON},
        ),
    ]
    baseline(words)  # warm up
    base = baseline(words)
    print(f"{'baseline: one TextDelta per token':38s} {base * 1e6:6.2f} µs/token")
    for label, chunks, config in cases:
        cost = per_token(chunks, **config)
        print(f"{label:38s} {cost * 1e6:6.2f} µs/token  {cost / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
