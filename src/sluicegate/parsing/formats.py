"""The markup formats the output parser knows, and how to pick one from a model's chat template.

A GGUF's chat template is the best evidence of how its model was trained to write tool calls
and reasoning: the template renders past calls and reasoning the same way the model writes
them. Config can always override the guess (`tool_call_format`, `reasoning`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class ToolCallFormat(StrEnum):
    NONE = "none"
    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen)
    LLAMA3_JSON = "llama3_json"  # the message is {"name": ..., "parameters": {...}} (Llama 3.x)
    MISTRAL = "mistral"  # [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[ARGS]{...}


@dataclass(slots=True, frozen=True)
class ReasoningStyle:
    """Reasoning wrapped in tags. `starts_open`: the template's generation prompt already opens
    the tag (Qwen3-thinking, DeepSeek-R1), so output begins inside reasoning; engines that have
    the rendered prompt should prefer `opened_by(prompt)`, which is exact."""

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    starts_open: bool = False

    def opened_by(self, prompt: str) -> bool:
        """Whether a rendered prompt leaves the reasoning tag open for the model to continue."""
        return prompt.rstrip().endswith(self.open_tag)


THINK = ReasoningStyle()

# Architectures whose models write Hermes-style calls, for GGUFs without a chat template.
_HERMES_ARCHITECTURES = frozenset({"qwen2", "qwen2moe", "qwen3", "qwen3moe"})

# The open tag at the end of a string literal in the template, maybe followed by a newline
# (written as `\n` in the Jinja source or as a real one): `'<|im_start|>assistant\n<think>\n'`.
_OPENS_THINK = re.compile(r"<think>(?:\\n|\n)*['\"]")


def detect_tool_format(chat_template: str | None, architecture: str | None = None) -> ToolCallFormat:
    """The tool-call markup a model writes, read from its chat template; the architecture is
    only a fallback for models that ship none."""
    if chat_template:
        if "[TOOL_CALLS]" in chat_template:
            return ToolCallFormat.MISTRAL
        if "<tool_call>" in chat_template:
            return ToolCallFormat.HERMES
        if "<|python_tag|>" in chat_template or (
            "<|start_header_id|>" in chat_template and '"parameters"' in chat_template
        ):
            return ToolCallFormat.LLAMA3_JSON
        return ToolCallFormat.NONE
    if architecture and architecture.lower() in _HERMES_ARCHITECTURES:
        return ToolCallFormat.HERMES
    return ToolCallFormat.NONE


def detect_reasoning(chat_template: str | None) -> ReasoningStyle | None:
    """`<think>` reasoning when the template knows the tags (it renders or strips them); it
    starts open when the generation prompt (the part after the last `add_generation_prompt`)
    ends a string with `<think>` — not when it renders past reasoning or an empty think block."""
    if not chat_template or ("<think>" not in chat_template and "</think>" not in chat_template):
        return None
    _, found, prompt = chat_template.rpartition("add_generation_prompt")
    return ReasoningStyle(starts_open=bool(found) and _OPENS_THINK.search(prompt) is not None)


def tool_format_setting(value: str) -> ToolCallFormat:
    """The config value `tool_call_format` ("hermes", "llama3_json", "mistral", "none")."""
    try:
        return ToolCallFormat(value.strip().lower())
    except ValueError:
        choices = ", ".join(f'"{f.value}"' for f in ToolCallFormat)
        raise ValueError(f"tool_call_format must be one of {choices}, not {value!r}") from None


def reasoning_setting(value: str) -> ReasoningStyle | None:
    """The config value `reasoning` ("think" or "none")."""
    match value.strip().lower():
        case "think":
            return THINK
        case "none":
            return None
    raise ValueError(f'reasoning must be "think" or "none", not {value!r}')
