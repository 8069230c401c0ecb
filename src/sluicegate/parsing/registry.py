"""The families the output parser knows, recognised by their chat template's fingerprint.

A GGUF's chat template is the best evidence of how its model was trained to write tool calls
and reasoning: it renders past calls and reasoning the way the model writes them. Families are
tried in order (the more specific fingerprints first: GLM's and Qwen3-Coder's templates also
contain `<tool_call>`, so they must be tried before Hermes). Config can always override the
guess (`tool_call_format`, `reasoning`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser
from sluicegate.parsing.families.deepseek import DEEPSEEK_R1, DEEPSEEK_V3_1
from sluicegate.parsing.families.functionary import FUNCTIONARY_V3_1, FUNCTIONARY_V3_2
from sluicegate.parsing.families.gemma import GEMMA4
from sluicegate.parsing.families.glm import GLM
from sluicegate.parsing.families.gpt_oss import HARMONY
from sluicegate.parsing.families.json_wrapped import APERTUS, COMMAND_R7B, GRANITE, NEMOTRON
from sluicegate.parsing.families.kimi import KIMI_K2
from sluicegate.parsing.families.legacy import HERMES, LLAMA3_JSON, MISTRAL
from sluicegate.parsing.families.lfm2 import LFM2
from sluicegate.parsing.families.minimax import MINIMAX_M2
from sluicegate.parsing.families.qwen_xml import QWEN3_CODER
from sluicegate.parsing.families.recent import RECENT
from sluicegate.parsing.families.seed_oss import SEED_OSS
from sluicegate.parsing.formats import THINK, ReasoningStyle, ToolCallFormat
from sluicegate.parsing.parser import OutputParser, new_call_id

# In the order they are tried.
FAMILIES: tuple[Family, ...] = (
    *RECENT,
    HARMONY,
    MISTRAL,
    FUNCTIONARY_V3_2,
    KIMI_K2,
    LFM2,
    MINIMAX_M2,
    DEEPSEEK_R1,
    DEEPSEEK_V3_1,
    GEMMA4,
    SEED_OSS,
    QWEN3_CODER,
    GLM,
    COMMAND_R7B,
    APERTUS,
    NEMOTRON,
    GRANITE,
    FUNCTIONARY_V3_1,
    HERMES,
    LLAMA3_JSON,
)
BY_FORMAT: dict[ToolCallFormat, Family] = {ToolCallFormat(f.name): f for f in FAMILIES}

# Architectures whose models write Hermes-style calls, for GGUFs without a chat template.
_HERMES_ARCHITECTURES = frozenset({"qwen2", "qwen2moe", "qwen3", "qwen3moe"})


def detect_family(chat_template: str | None) -> Family | None:
    if not chat_template:
        return None
    return next((f for f in FAMILIES if f.fingerprint(chat_template)), None)


def detect_tool_format(chat_template: str | None, architecture: str | None = None) -> ToolCallFormat:
    """The tool-call markup a model writes, read from its chat template; the architecture is
    only a fallback for models that ship none."""
    if chat_template:
        family = detect_family(chat_template)
        return ToolCallFormat(family.name) if family else ToolCallFormat.NONE
    if architecture and architecture.lower() in _HERMES_ARCHITECTURES:
        return ToolCallFormat.HERMES
    return ToolCallFormat.NONE


def _opens(tag: str) -> re.Pattern[str]:
    # The open tag at the end of a string literal in the template, maybe followed by a newline
    # (written as `\n` in the Jinja source or as a real one): `'<|im_start|>assistant\n<think>\n'`.
    return re.compile(re.escape(tag) + r"(?:\\n|\n)*['\"]")


def detect_reasoning(chat_template: str | None) -> ReasoningStyle | None:
    """The family's reasoning tags when the template knows them, else `<think>` when it does.
    It starts open when the generation prompt (the part after the last
    `add_generation_prompt`) ends a string with the open tag."""
    if not chat_template:
        return None
    family = detect_family(chat_template)
    style = family.reasoning if family else None
    built = family is not None and family.reasoning_built
    if style is None or (
        not built and style.open_tag not in chat_template and style.close_tag not in chat_template
    ):
        if "<think>" not in chat_template and "</think>" not in chat_template:
            return None
        style = THINK
    _, found, prompt = chat_template.rpartition("add_generation_prompt")
    starts_open = bool(found) and _opens(style.open_tag).search(prompt) is not None
    return ReasoningStyle(style.open_tag, style.close_tag, starts_open)


def reasoning_setting(value: str) -> ReasoningStyle | None:
    """The config value `reasoning`: "think", "none", or a family's name for its own tags."""
    name = value.strip().lower()
    if name == "think":
        return THINK
    if name == "none":
        return None
    family = next((f for f in FAMILIES if f.name == name), None)
    if family is None:
        choices = ", ".join(f'"{f.name}"' for f in FAMILIES if f.reasoning is not None)
        raise ValueError(f'reasoning must be "think", "none" or one of {choices}, not {value!r}')
    return family.reasoning or THINK


def tool_schemas(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, object]]:
    """Tool name → its parameters' schema, from OpenAI-style tool objects (or bare functions)."""
    out: dict[str, dict[str, object]] = {}
    for tool in tools or ():
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            params = function.get("parameters")
            out[function["name"]] = params if isinstance(params, dict) else {}
    return out


def new_parser(
    tool_format: ToolCallFormat = ToolCallFormat.NONE,
    *,
    reasoning: ReasoningStyle | None = None,
    starts_in_reasoning: bool = False,
    tools: dict[str, dict[str, object]] | None = None,
    new_call_id: Callable[[], str] = new_call_id,
    continues: bool = False,
) -> StreamParser:
    """The streaming parser for a generation in `tool_format`. `continues`: the prompt ends
    inside a message the output continues (`continue_final_message`)."""
    family = BY_FORMAT.get(tool_format)
    args = ParserArgs(reasoning, starts_in_reasoning, tools or {}, new_call_id, continues)
    if family is None:  # no calls: reasoning tags at most
        return OutputParser(
            reasoning=reasoning, starts_in_reasoning=starts_in_reasoning, new_call_id=new_call_id
        )
    return family.build(args)
