"""The markup formats the output parser knows, and how to pick one from a model's chat template.

A GGUF's chat template is the best evidence of how its model was trained to write tool calls
and reasoning: the template renders past calls and reasoning the same way the model writes
them. Config can always override the guess (`tool_call_format`, `reasoning`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class ToolCallFormat(str):
    """The markup a model writes tool calls in: a family's name (registry.py lists them, and
    `tool_format_setting` checks a configured one), or "none"."""

    __slots__ = ()
    NONE: ClassVar[ToolCallFormat]
    _made: ClassVar[dict[str, ToolCallFormat]] = {}

    def __new__(cls, name: str) -> ToolCallFormat:
        # One object per name, as an enum member is (`is` compares them).
        made = cls._made.get(name)
        if made is None:
            made = cls._made[name] = super().__new__(cls, name)
        return made


ToolCallFormat.NONE = ToolCallFormat("none")


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
