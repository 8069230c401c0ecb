"""Reasoning and tool calls parsed out of generated text while it streams.

Engines that see raw model text (llama.cpp; an upstream that leaves `<think>` in `content`)
feed it to the parser `new_parser` returns for the model's family and yield the raw events it
returns. One module per family in `families/`, one registry (registry.py) that recognises a
family by its chat template. A family is declared once, in its module (families/base.py
says what a declaration holds). See docs/parsing.md.
"""

from sluicegate.parsing.families.base import Family, StreamParser
from sluicegate.parsing.formats import THINK, ReasoningStyle, ToolCallFormat
from sluicegate.parsing.markup import OutputParser, new_call_id
from sluicegate.parsing.plain import PlainText
from sluicegate.parsing.registry import (
    FAMILIES,
    detect_family,
    detect_reasoning,
    detect_tool_format,
    family_named,
    new_parser,
    reasoning_setting,
    tool_format_setting,
    tool_schemas,
)

__all__ = [
    "FAMILIES",
    "THINK",
    "Family",
    "OutputParser",
    "PlainText",
    "ReasoningStyle",
    "StreamParser",
    "ToolCallFormat",
    "detect_family",
    "detect_reasoning",
    "detect_tool_format",
    "family_named",
    "new_call_id",
    "new_parser",
    "reasoning_setting",
    "tool_format_setting",
    "tool_schemas",
]
