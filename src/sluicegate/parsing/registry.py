"""The families the output parser knows, recognised by their chat template's fingerprint.

A GGUF's chat template is the best evidence of how its model was trained to write tool calls
and reasoning: it renders past calls and reasoning the way the model writes them. Families are
tried in order (the more specific fingerprints first: GLM's and Qwen3-Coder's templates also
contain `<tool_call>`, so they must be tried before Hermes). Config can always override the
guess (`tool_call_format`, `reasoning`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser
from sluicegate.parsing.formats import THINK, ReasoningStyle, ToolCallFormat
from sluicegate.parsing.markup import OutputParser, new_call_id

# Every family, one line each (module:declaration), in the order they are tried. The families
# added after the first nineteen come first: their fingerprints are specific, and some of their
# templates also contain an older family's marker (MiniMax M3's `<tool_call>`, Apriel's
# `<tool_calls>`).
_DECLARED = (
    "deepseek_dsml:DEEPSEEK_V3_2",
    "deepseek_dsml:DEEPSEEK_V4",
    "kimi_k3:KIMI_K3",
    "minimax_m3:MINIMAX_M3",
    "minicpm5:MINICPM5",
    "json_marked:GIGACHAT3",
    "json_marked:GIGACHAT3_1",
    "json_marked:APRIEL",
    "json_marked:COMMAND_R_PLUS",
    "json_marked:FIREFUNCTION_V2",
    "hy3:HY3",
    "muse_glimmer:MUSE_GLIMMER",
    "solar_minimax_m1:SOLAR_OPEN",
    "solar_minimax_m1:MINIMAX_M1",
    "llama4:LLAMA4_PYTHONIC",
    "gpt_oss:HARMONY",
    "legacy:MISTRAL",
    "functionary:FUNCTIONARY_V3_2",
    "kimi:KIMI_K2",
    "lfm2:LFM2",
    "minimax:MINIMAX_M2",
    "deepseek:DEEPSEEK_R1",
    "deepseek:DEEPSEEK_V3_1",
    "gemma:GEMMA4",
    "seed_oss:SEED_OSS",
    "qwen_xml:QWEN3_CODER",
    "glm:GLM",
    "json_wrapped:COMMAND_R7B",
    "json_wrapped:APERTUS",
    "json_wrapped:NEMOTRON",
    "json_wrapped:GRANITE",
    "functionary:FUNCTIONARY_V3_1",
    "legacy:HERMES",
    "legacy:LLAMA3_JSON",
)


def _declared(entry: str) -> Family:
    module, _, name = entry.partition(":")
    family = getattr(importlib.import_module(f"sluicegate.parsing.families.{module}"), name)
    assert isinstance(family, Family), entry
    return family


FAMILIES: tuple[Family, ...] = tuple(_declared(entry) for entry in _DECLARED)
_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}


def family_named(tool_format: str | None) -> Family | None:
    """The declaration of the family a `tool_call_format` names (None for "none")."""
    return _BY_NAME.get(tool_format) if tool_format else None


def tool_format_setting(value: str) -> ToolCallFormat:
    """The config value `tool_call_format`: a family's name, or "none"."""
    name = value.strip().lower()
    if name == ToolCallFormat.NONE or name in _BY_NAME:
        return ToolCallFormat(name)
    choices = ", ".join(f'"{n}"' for n in (ToolCallFormat.NONE, *_BY_NAME))
    raise ValueError(f"tool_call_format must be one of {choices}, not {value!r}")


def detect_family(chat_template: str | None) -> Family | None:
    """The family whose fingerprint the template matches first: the one place a template is
    fingerprinted (the engine's quirks, grammars and prompts read the declaration it returns)."""
    return _detect(chat_template) if chat_template else None


@lru_cache(maxsize=64)  # asked for every rendered prompt; a model's template does not change
def _detect(chat_template: str) -> Family | None:
    return next((f for f in FAMILIES if f.fingerprint(chat_template)), None)


def detect_tool_format(chat_template: str | None, architecture: str | None = None) -> ToolCallFormat:
    """The tool-call markup a model writes, read from its chat template; the architecture is
    only a fallback for models that ship none."""
    if chat_template:
        family = detect_family(chat_template)
        return ToolCallFormat(family.name) if family else ToolCallFormat.NONE
    arch = (architecture or "").lower()
    family = next((f for f in FAMILIES if arch in f.architectures), None)
    return ToolCallFormat(family.name) if family else ToolCallFormat.NONE


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
    family = family_named(tool_format)
    args = ParserArgs(reasoning, starts_in_reasoning, tools or {}, new_call_id, continues)
    if family is None:  # no calls: reasoning tags at most
        return OutputParser(
            reasoning=reasoning,
            starts_in_reasoning=starts_in_reasoning,
            new_call_id=new_call_id,
            continues=continues,
        )
    return family.build(args)
