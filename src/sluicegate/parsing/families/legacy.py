"""The first three formats: Hermes 2/3 (and Qwen 2.5/3, SmolLM3, Granite 4), `<tool_call>{"name":
..., "arguments": ...}</tool_call>`, and Mistral, `[TOOL_CALLS]` then a JSON array or
`name[ARGS]{...}`, read like the other JSON families (arguments streamed); Llama 3.x JSON, a
call object as the whole message (maybe after `<|python_tag|>`, several separated by `;`),
whose arguments stream when the object names the function first."""

from __future__ import annotations

import re

from sluicegate.parsing.calls import INVALID, broken_call, call_from_object, name_in, parse_json
from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import ObjectCall
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import JsonArgs, json_or_text
from sluicegate.parsing.markup import CallOut, Markup, Reader
from sluicegate.parsing.quirks import Json, Quirks, typed_blocks
from sluicegate.parsing.readers import JsonCallsReader, NameJson, NameJsonReader
from sluicegate.parsing.scan import JsonScanner

MISTRAL_THINK = ReasoningStyle("[THINK]", "[/THINK]")


PYTHON_TAG = "<|python_tag|>"
_SEPARATORS = " \t\r\n;"  # between Llama 3 JSON calls
# A Llama 3 call that names itself first: its arguments object can stream from here.
_LLAMA_HEAD = re.compile(
    r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
    r'"(?:parameters|arguments)"\s*:\s*(?=\{)'
)


class JsonMessageReader:
    """Llama 3: from the `{` that opens the message, call objects (separated by `;`, whitespace
    or `<|python_tag|>`) until text that is not one. A JSON value that is not a call is the
    model answering in JSON: it goes back as text."""

    __slots__ = ("_args", "_buf", "_json", "_mode")

    def __init__(self) -> None:
        self._buf = ""
        self._mode = "call"  # call | args (streamed) | end (of the object) | next
        self._json = JsonScanner()
        self._args = JsonArgs()

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        while True:
            buf = self._buf
            if self._mode == "call":
                if (head := _LLAMA_HEAD.match(buf)) is not None:
                    name = json_or_text(f'"{head.group(1)}"')
                    out.begin(name if isinstance(name, str) else head.group(1))
                    self._buf, self._args, self._mode = buf[head.end() :], JsonArgs(), "args"
                    continue
                end = self._json.end(buf)
                if end is None:
                    return None
                raw, self._buf = buf[:end], buf[end:]
                value = parse_json(raw)
                call = None if value is INVALID else call_from_object(value, strict=True)
                if call is None and value is INVALID and name_in(raw) is not None:
                    call = broken_call(raw)
                if call is None:  # JSON, but not a call
                    return raw + self._buf
                out.call(*call)
                self._mode = "next"
            elif self._mode == "args":
                piece, rest = self._args.feed(buf)
                out.args(piece)
                if rest is None:
                    self._buf = ""
                    return None
                self._buf, self._json, self._mode = rest, JsonScanner(), "end"
                self._json.depth = 1  # inside the call's object, after its arguments
            elif self._mode == "end":
                end = self._json.end(buf)
                if end is None:
                    return None
                self._buf, self._mode = buf[end:], "next"
            else:
                after = buf.lstrip(_SEPARATORS)
                self._buf = after
                if not after or (PYTHON_TAG.startswith(after) and after != PYTHON_TAG):
                    return None
                if after.startswith(PYTHON_TAG):
                    self._buf = after[len(PYTHON_TAG) :]
                elif after[0] == "{":
                    self._mode, self._json = "call", JsonScanner()
                else:
                    self._buf = ""
                    return after

    def close(self, out: CallOut) -> str | None:
        if self._mode != "call":
            return None  # separators, a partial <|python_tag|>, a cut-off call's arguments (left)
        if name_in(self._buf) is not None:
            out.call(*broken_call(self._buf))
            return None
        return self._buf  # JSON cut off before it named a function: text


JSON_MESSAGE = Markup(leading=lambda tools: JsonMessageReader(), lead_in=PYTHON_TAG)
# Llama 3's parser (Llama 4's pythonic family reads its text with it too).
json_message_parser = markup_family(JSON_MESSAGE)


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
