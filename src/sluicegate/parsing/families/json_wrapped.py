"""Families whose calls are JSON objects (or arrays of them) between their own tokens:

- Nemotron Nano v2: `<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>`, `<think>`
- Granite 3.3: `<|tool_call|>[{"name": ..., "arguments": {...}}]`, `<think>`, `<response>`
- Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|>`,
  `<|START_THINKING|>` reasoning, the answer in `<|START_RESPONSE|>…<|END_RESPONSE|>`
- Apertus: `<|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>`, `<|inner_prefix|>` reasoning
"""

from __future__ import annotations

import json

from sluicegate.parsing.families.base import Fallback, Family, has, markup_family
from sluicegate.parsing.forced import JsonCall
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import JsonCallsReader

NEMOTRON = Family(
    "nemotron",
    has("<TOOLCALL>"),
    markup_family(Markup(calls=(("<TOOLCALL>", lambda tools: JsonCallsReader("</TOOLCALL>")),))),
    templates=("NVIDIA-Nemotron-Nano-v2.jinja",),
    call=JsonCall(lambda n: f'<TOOLCALL>[{{"name": {json.dumps(n)}, "arguments": ', "}]</TOOLCALL>"),
)
# llama.cpp's built-in `granite` template, for a Granite GGUF without one.
_GRANITE_TEMPLATE = """\
{%- for message in messages -%}
{{- '<|start_of_role|>' + message.role + '<|end_of_role|>' -}}
{%- if message.role == 'assistant_tool_call' -%}{{- '<|tool_call|>' -}}{%- endif -%}
{{- message.content + '<|end_of_text|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"""

GRANITE = Family(
    "granite",
    has("<|tool_call|>"),
    markup_family(
        Markup(
            calls=(("<|tool_call|>", lambda tools: JsonCallsReader(None)),),
            drop=("<response>", "</response>"),
        )
    ),
    templates=("ibm-granite-granite-3.3-2B-Instruct.jinja",),
    call=JsonCall(lambda n: f'<|tool_call|>[{{"name": {json.dumps(n)}, "arguments": ', "}]"),
    fallback=Fallback("granite", _GRANITE_TEMPLATE, ("granite", "granitemoe")),
)
COMMAND_R7B = Family(
    "command_r7b",
    has("<|START_ACTION|>"),
    markup_family(
        Markup(
            calls=(("<|START_ACTION|>", lambda tools: JsonCallsReader("<|END_ACTION|>")),),
            drop=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"),
        )
    ),
    reasoning=ReasoningStyle("<|START_THINKING|>", "<|END_THINKING|>"),
    templates=("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "Cohere2MoE.jinja"),
    call=JsonCall(
        lambda n: f'<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": {json.dumps(n)}, "parameters": ',
        "}]<|END_ACTION|>",
    ),
)
APERTUS = Family(
    "apertus",
    has("<|tools_prefix|>"),
    markup_family(
        Markup(
            calls=(("<|tools_prefix|>", lambda tools: JsonCallsReader("<|tools_suffix|>", name_as_key=True)),)
        )
    ),
    reasoning=ReasoningStyle("<|inner_prefix|>", "<|inner_suffix|>"),
    templates=("Apertus-8B-Instruct.jinja",),
    call=JsonCall(lambda n: f"<|tools_prefix|>[{{{json.dumps(n)}: ", "}]<|tools_suffix|>"),
)
