"""Families whose calls are JSON objects (or an array of them) after a marker of their own:

- Command R+: `Action:` then a fenced JSON array, `[{"tool_name": ..., "parameters": {...}}]`
- Firefunction v2: ` functools[{"name": ..., "arguments": {...}}]` (no closing marker)
- Apriel 1.5 / 1.6: `<tool_calls>[{"name": ..., "arguments": {...}}]</tool_calls>`; 1.6 thinks
  after the generation prompt's `Here are my reasoning steps:` until `[BEGIN FINAL RESPONSE]`
- GigaChat 3: `<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": ..., "arguments": {...}}`;
  GigaChat 3.1: `<|function_call|>{...}`
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import json_object_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import JsonCallsReader


def _fenced(tools: object) -> JsonCallsReader:
    return JsonCallsReader("```")


COMMAND_R_PLUS = Family(
    "command_r_plus",
    lambda s: has("Action:", "```json", "<|CHATBOT_TOKEN|>")(s) and "<|START_ACTION|>" not in s,
    markup_family(
        Markup(
            # The fence is part of the marker: `Action:` alone is prose.
            calls=(("Action:\n```json", _fenced), ("Action: ```json", _fenced)),
            drop=("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>"),
        )
    ),
    templates=("CohereForAI-c4ai-command-r-plus-tool_use.jinja",),
    call=json_object_call("Action:\n```json\n[", "tool_name", "parameters", "]\n```"),
)
FIREFUNCTION_V2 = Family(
    "firefunction_v2",
    has("functools["),
    # The bracket is part of the marker (`functools` alone is prose): the calls as array items.
    markup_family(Markup(calls=(("functools[", lambda tools: JsonCallsReader(None, several=True)),))),
    templates=("fireworks-ai-llama-3-firefunction-v2.jinja",),
    call=json_object_call(" functools[", "name", "arguments", "]"),
)
APRIEL = Family(
    "apriel",
    has("<tool_calls>", "[BEGIN FINAL RESPONSE]"),
    markup_family(
        Markup(
            calls=(("<tool_calls>", lambda tools: JsonCallsReader("</tool_calls>")),),
            drop=("[END FINAL RESPONSE]", "<|end|>"),
        )
    ),
    reasoning=ReasoningStyle("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
    templates=("unsloth-Apriel-1.5.jinja", "Apriel-1.6-15b-Thinker-fixed.jinja"),
    reasoning_built=True,
    call=json_object_call("<tool_calls>[", "name", "arguments", "]</tool_calls>"),
)
_GIGACHAT_CALLS = Markup(
    calls=(
        ("function call<|role_sep|>", lambda tools: JsonCallsReader(None)),
        ("<|function_call|>", lambda tools: JsonCallsReader(None)),
    ),
    drop=("<|message_sep|>",),
)
GIGACHAT3 = Family(
    "gigachat3",
    lambda s: has("<|role_sep|>", "<|message_sep|>")(s) and "<|function_call|>" not in s,
    markup_family(_GIGACHAT_CALLS),
    templates=("GigaChat3-10B-A1.8B.jinja",),
    call=json_object_call("<|message_sep|>\n\nfunction call<|role_sep|>\n", "name", "arguments", ""),
)
GIGACHAT3_1 = Family(
    "gigachat3_1",
    has("<|role_sep|>", "<|function_call|>"),
    markup_family(_GIGACHAT_CALLS),  # (either call form is read in both)
    templates=("GigaChat3.1-10B-A1.8B.jinja",),
    call=json_object_call("<|function_call|>", "name", "arguments", ""),
)
