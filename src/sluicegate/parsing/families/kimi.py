"""Kimi K2 (`<think>` reasoning in K2 Thinking):

<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
"""

from __future__ import annotations

import re

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import JsonCall
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import NameJson, NameJsonReader

_ID = re.compile(r"^(?:functions\.)?(.*?)(?::\d+)?$")


def tool_name(call_id: str) -> str:
    """`functions.get_weather:0` → `get_weather`."""
    m = _ID.match(call_id.strip())
    return m.group(1) if m else call_id.strip()


KIMI_CALL = NameJson(
    name_end=("<|tool_call_argument_begin|>",), close="<|tool_call_end|>", clean_name=tool_name
)

KIMI_K2 = Family(
    "kimi_k2",
    has("<|tool_calls_section_begin|>"),
    markup_family(
        Markup(
            calls=(("<|tool_call_begin|>", lambda tools: NameJsonReader(KIMI_CALL)),),
            drop=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
            calls_end_reasoning=True,
        )
    ),
    templates=("moonshotai-Kimi-K2.jinja", "Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja"),
    call=JsonCall(
        lambda n: (
            f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{n}:0<|tool_call_argument_begin|>"
        ),
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
)
