"""The markup formats the output parser knows, and how to pick one from a model's chat template.

A GGUF's chat template is the best evidence of how its model was trained to write tool calls
and reasoning: the template renders past calls and reasoning the same way the model writes
them. Config can always override the guess (`tool_call_format`, `reasoning`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ToolCallFormat(StrEnum):
    NONE = "none"
    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen)
    LLAMA3_JSON = "llama3_json"  # the message is {"name": ..., "parameters": {...}} (Llama 3.x)
    MISTRAL = "mistral"  # [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[ARGS]{...}
    # One per family module in parsing/families/ (the module's docstring shows the markup).
    HARMONY = "harmony"
    QWEN3_CODER = "qwen3_coder"
    GLM = "glm"
    DEEPSEEK_R1 = "deepseek_r1"
    DEEPSEEK_V3_1 = "deepseek_v3_1"
    KIMI_K2 = "kimi_k2"
    MINIMAX_M2 = "minimax_m2"
    GEMMA4 = "gemma4"
    LFM2 = "lfm2"
    SEED_OSS = "seed_oss"
    NEMOTRON = "nemotron"
    GRANITE = "granite"
    COMMAND_R7B = "command_r7b"
    APERTUS = "apertus"
    FUNCTIONARY_V3_1 = "functionary_v3_1"
    FUNCTIONARY_V3_2 = "functionary_v3_2"
    DEEPSEEK_V3_2 = "deepseek_v3_2"
    DEEPSEEK_V4 = "deepseek_v4"
    KIMI_K3 = "kimi_k3"
    MINIMAX_M3 = "minimax_m3"
    COMMAND_R_PLUS = "command_r_plus"
    FIREFUNCTION_V2 = "firefunction_v2"
    APRIEL = "apriel"
    GIGACHAT3 = "gigachat3"
    GIGACHAT3_1 = "gigachat3_1"
    MINICPM5 = "minicpm5"
    LLAMA4_PYTHONIC = "llama4_pythonic"
    HY3 = "hy3"
    MUSE_GLIMMER = "muse_glimmer"
    SOLAR_OPEN = "solar_open"
    MINIMAX_M1 = "minimax_m1"


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


def tool_format_setting(value: str) -> ToolCallFormat:
    """The config value `tool_call_format` ("hermes", "llama3_json", "mistral", "none")."""
    try:
        return ToolCallFormat(value.strip().lower())
    except ValueError:
        choices = ", ".join(f'"{f.value}"' for f in ToolCallFormat)
        raise ValueError(f"tool_call_format must be one of {choices}, not {value!r}") from None
