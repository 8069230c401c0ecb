"""What a family's chat template wants done to a conversation before it sees it, as llama.cpp's
`common/chat.cpp` and `common/parsers/*.cpp` do it: declared by the family
(`Family.quirks`), applied by the engine (engines/llamacpp/template_quirks.py). Plain functions
over llama.cpp-shaped messages (JSON), so they sit here with the declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
# The template's source and the messages -> the messages as the template wants them.
Adjust = Callable[[str, list[Json]], list[Json]]


@dataclass(frozen=True, slots=True)
class Quirks:
    """`adjust`: rewrites of the messages, in order. `channels`: the template writes gpt-oss's
    channels, so a `developer` turn stays one, system turns are not merged, and a continued
    message is continued in its channel. `patch`: a check in the template that llama.cpp
    replaces with `{%- if false %}` (common_chat_templates_init)."""

    adjust: tuple[Adjust, ...] = ()
    channels: bool = False
    patch: str = ""


NO_QUIRKS = Quirks()


def thinking(drop_content_with_calls: bool) -> Adjust:
    """Reasoning handed over as `thinking` (gpt-oss, LFM2); gpt-oss drops the text of a turn
    with calls."""

    def adjust(source: str, messages: list[Json]) -> list[Json]:
        out = []
        for message in messages:
            message = dict(message)
            if isinstance(message.get("reasoning_content"), str):
                message["thinking"] = message["reasoning_content"]
                if drop_content_with_calls and message.get("tool_calls"):
                    message.pop("content", None)
            out.append(message)
        return out

    return adjust


def typed_blocks(messages: list[Json]) -> list[Json]:
    """System and assistant turns as typed blocks, reasoning as a `thinking` block (Ministral 3)."""
    out = []
    for message in messages:
        if message["role"] not in ("system", "assistant"):
            out.append(message)
            continue
        blocks: list[Json] = []
        if isinstance(message.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": message["reasoning_content"]})
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        adjusted = {k: v for k, v in message.items() if k != "reasoning_content"}
        adjusted["content"] = blocks
        out.append(adjusted)
    return out


def tool_results_in_call_order(source: str, messages: list[Json]) -> list[Json]:
    """A run of tool results (user turns may sit among them) in its calls' order (DeepSeek V4)."""
    out = list(messages)
    order: dict[str, int] = {}
    i = 0
    while i < len(out):
        role = out[i]["role"]
        if role == "assistant" and out[i].get("tool_calls"):
            order = {c["id"]: n for n, c in enumerate(out[i]["tool_calls"]) if c.get("id")}
            i += 1
            continue
        if role not in ("user", "tool"):
            i += 1
            continue
        end = i
        while end < len(out) and out[end]["role"] in ("user", "tool"):
            end += 1
        positions = [p for p in range(i, end) if out[p]["role"] == "tool"]
        if len(positions) > 1 and order:
            results = sorted(
                (out[p] for p in positions), key=lambda m: order.get(m.get("tool_call_id", ""), 0)
            )
            for p, result in zip(positions, results, strict=True):
                out[p] = result
        i = max(end, i + 1)
    return out
