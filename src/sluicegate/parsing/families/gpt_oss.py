"""gpt-oss (Harmony): see harmony.py for the format."""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser, has
from sluicegate.parsing.families.harmony import HarmonyParser
from sluicegate.parsing.formats import ReasoningStyle


def _build(args: ParserArgs) -> StreamParser:
    return HarmonyParser(new_call_id=args.new_call_id, in_analysis=args.starts_in_reasoning)


HARMONY = Family(
    "harmony",
    has("<|channel|>"),
    _build,
    reasoning=ReasoningStyle("<|channel|>analysis<|message|>", "<|end|>"),
    templates=("openai-gpt-oss-120b.jinja",),
)
