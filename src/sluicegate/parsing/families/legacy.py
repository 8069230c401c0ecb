"""The first three formats: Hermes 2/3 (and Qwen 2.5/3, SmolLM3, Granite 4), `<tool_call>{"name":
..., "arguments": ...}</tool_call>`, and Mistral, `[TOOL_CALLS]` then a JSON array or
`name[ARGS]{...}`, read like the other JSON families (arguments streamed); Llama 3.x JSON, a
call object as the whole message, by the first output parser (parser.py), whole."""

from __future__ import annotations

from collections.abc import Callable

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser, has, markup_family
from sluicegate.parsing.forced import ObjectCall
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import CallOut, Markup, Reader
from sluicegate.parsing.parser import Calls, OutputParser
from sluicegate.parsing.quirks import Json, Quirks, typed_blocks
from sluicegate.parsing.readers import JsonCallsReader, NameJson, NameJsonReader

MISTRAL_THINK = ReasoningStyle("[THINK]", "[/THINK]")


def _legacy(calls: Calls) -> Callable[[ParserArgs], StreamParser]:
    def build(args: ParserArgs) -> StreamParser:
        return OutputParser(
            calls=calls,
            reasoning=args.reasoning,
            starts_in_reasoning=args.starts_in_reasoning,
            new_call_id=args.new_call_id,
        )

    return build


# Llama 3's parser: a JSON call object as the message (Llama 4's pythonic family reads it too).
json_message_parser = _legacy(Calls.JSON_MESSAGE)


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
    call=ObjectCall("<tool_call>\n", "\n</tool_call>"),
    # Qwen GGUFs without a chat template still write Hermes calls.
    architectures=("qwen2", "qwen2moe", "qwen3", "qwen3moe"),
)
LLAMA3_JSON = Family(
    "llama3_json",
    _llama3,
    json_message_parser,
    templates=(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
    ),
    call=ObjectCall("", "", "parameters"),
)


class MistralReader:
    """After `[TOOL_CALLS]`: a JSON array of calls (Mistral Nemo, Small), or `name[ARGS]{...}`,
    maybe with `[CALL_ID]id` before `[ARGS]` (Ministral, Magistral, Devstral)."""

    def __init__(self) -> None:
        self._reader: Reader | None = None
        self._buf = ""

    def feed(self, text: str, out: CallOut) -> str | None:
        if self._reader is None:
            self._buf += text
            head = self._buf.lstrip()
            if not head:
                return None
            self._reader = JsonCallsReader(None) if head[0] == "[" else NameJsonReader(MISTRAL_CALL)
            text, self._buf = head, ""
        return self._reader.feed(text, out)

    def close(self, out: CallOut) -> None:
        if self._reader is None:
            out.call("", "")  # cut off right after [TOOL_CALLS]
        else:
            self._reader.close(out)


MISTRAL_CALL = NameJson(name_end=("[ARGS]",), clean_name=lambda name: name.split("[CALL_ID]")[0].strip())


def _ministral3(source: str, messages: list[Json]) -> list[Json]:
    """Ministral 3's templates (no `[CALL_ID]`) want typed content blocks, as llama.cpp's
    common/parsers/ministral3.cpp hands them over."""
    if "[SYSTEM_PROMPT]" in source and "[ARGS]" in source and "[CALL_ID]" not in source:
        return typed_blocks(messages)
    return messages


# A check in the template that refuses a turn with neither text nor calls; llama.cpp patches it out.
_EMPTY_TURN_CHECK = (
    "{%- if (message['content'] is none or message['content'] == '' or "
    "message['content']|length == 0) and (message['tool_calls'] is not defined or "
    "message['tool_calls'] is none or message['tool_calls']|length == 0) %}"
)

MISTRAL = Family(
    "mistral",
    has("[TOOL_CALLS]"),
    markup_family(Markup(calls=(("[TOOL_CALLS]", lambda tools: MistralReader()),))),
    reasoning=MISTRAL_THINK,
    templates=(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "unsloth-mistral-Devstral-Small-2507.jinja",
    ),
    call=ObjectCall("[TOOL_CALLS][", "]"),
    quirks=Quirks(adjust=(_ministral3,), patch=_EMPTY_TURN_CHECK),
)
