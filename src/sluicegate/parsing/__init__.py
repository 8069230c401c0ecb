"""Reasoning and tool calls parsed out of generated text while it streams.

Engines that see raw model text (llama.cpp; an upstream that leaves `<think>` in `content`)
feed it to an `OutputParser` and yield the raw events it returns. See docs/parsing.md.
"""

from sluicegate.parsing.formats import (
    THINK,
    ReasoningStyle,
    ToolCallFormat,
    detect_reasoning,
    detect_tool_format,
    reasoning_setting,
    tool_format_setting,
)
from sluicegate.parsing.parser import OutputParser, new_call_id
from sluicegate.parsing.plain import PlainText

__all__ = [
    "THINK",
    "OutputParser",
    "PlainText",
    "ReasoningStyle",
    "ToolCallFormat",
    "detect_reasoning",
    "detect_tool_format",
    "new_call_id",
    "reasoning_setting",
    "tool_format_setting",
]
