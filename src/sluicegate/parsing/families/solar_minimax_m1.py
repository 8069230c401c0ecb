"""Two families with a call syntax each, and no llama.cpp parse cases:

- Solar Open: `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|><|calls|>`,
  reasoning in `<|think|>…<|end|>`, the answer after `<|begin|>assistant<|content|>`
- MiniMax M1: `<tool_calls>\\n{"name": ..., "arguments": {...}}\\n{...}\\n</tool_calls>` (a call a line),
  `<think>` reasoning
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import JsonCall, json_object_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import JsonCallsReader, NameJson, NameJsonReader

SOLAR_NAME, SOLAR_ARGS = "<|tool_call:name|>", "<|tool_call:args|>"
SOLAR_CALL = NameJson(
    name_end=(SOLAR_ARGS,),
    close="<|tool_call:end|>",
    clean_name=lambda text: text.rpartition(SOLAR_NAME)[2].strip(),  # after the call's id
)

SOLAR_OPEN = Family(
    "solar_open",
    has("<|tool_call:begin|>", SOLAR_ARGS),
    markup_family(
        Markup(
            calls=(("<|tool_call:begin|>", lambda tools: NameJsonReader(SOLAR_CALL)),),
            drop=("<|begin|>assistant", "<|content|>", "<|tool_calls|>", "<|calls|>", "<|end|>"),
            calls_end_reasoning=True,
        )
    ),
    reasoning=ReasoningStyle("<|think|>", "<|end|>"),
    templates=("upstage-Solar-Open-100B.jinja",),
    call=JsonCall(
        lambda n: f"<|tool_calls|><|tool_call:begin|>call_0<|tool_call:name|>{n}<|tool_call:args|>",
        "<|tool_call:end|><|calls|>",
    ),
)
MINIMAX_M1 = Family(
    "minimax_m1",
    has("<tool_calls>", "<beginning_of_sentence>"),
    markup_family(
        Markup(calls=(("<tool_calls>", lambda tools: JsonCallsReader("</tool_calls>", several=True)),))
    ),
    templates=("MiniMax-M1.jinja",),
    call=json_object_call("<tool_calls>\n", "name", "arguments", "\n</tool_calls>"),
)
