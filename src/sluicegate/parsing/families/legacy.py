"""Hermes 2/3 (and Qwen 2.5/3, SmolLM3, Granite 4): `<tool_call>{"name": ..., "arguments": ...}
</tool_call>`, read like the other JSON families (arguments streamed). Llama 3.x JSON and
Mistral: the formats the first output parser (parser.py) reads; their calls leave whole."""

from __future__ import annotations

from collections.abc import Callable

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser, has, markup_family
from sluicegate.parsing.formats import ReasoningStyle, ToolCallFormat
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.parser import OutputParser
from sluicegate.parsing.readers import JsonCallsReader

MISTRAL_THINK = ReasoningStyle("[THINK]", "[/THINK]")


def _legacy(fmt: ToolCallFormat) -> Callable[[ParserArgs], StreamParser]:
    def build(args: ParserArgs) -> StreamParser:
        return OutputParser(
            tool_format=fmt,
            reasoning=args.reasoning,
            starts_in_reasoning=args.starts_in_reasoning,
            new_call_id=args.new_call_id,
        )

    return build


def _llama3(source: str) -> bool:
    return "<|python_tag|>" in source or ("<|start_header_id|>" in source and '"parameters"' in source)


HERMES = Family(
    "hermes",
    lambda s: "<tool_call>" in s or "named SmolLM" in s,
    markup_family(Markup(calls=(("<tool_call>", lambda tools: JsonCallsReader("</tool_call>")),))),
    templates=(
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "Qwen-Qwen3-0.6B.jinja",
        "Qwen-QwQ-32B.jinja",
        "HuggingFaceTB-SmolLM3-3B.jinja",
        "ibm-granite-granite-4.0.jinja",
        "ibm-granite-granite-4.1.jinja",
        "MiMo-VL.jinja",
        "Reka-Edge.jinja",
    ),
)
LLAMA3_JSON = Family(
    "llama3_json",
    _llama3,
    _legacy(ToolCallFormat.LLAMA3_JSON),
    templates=(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
    ),
)
MISTRAL = Family(
    "mistral",
    has("[TOOL_CALLS]"),
    _legacy(ToolCallFormat.MISTRAL),
    reasoning=MISTRAL_THINK,
    templates=(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "unsloth-mistral-Devstral-Small-2507.jinja",
    ),
)
