"""gpt-oss (Harmony): see harmony.py for the format."""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, ParserArgs, StreamParser, has
from sluicegate.parsing.families.harmony import CHANNEL, MESSAGE, START, HarmonyParser
from sluicegate.parsing.forced import AnswerMarkup, JsonCall, ThoughtBlock
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.quirks import Quirks, thinking


def _build(args: ParserArgs) -> StreamParser:
    return HarmonyParser(new_call_id=args.new_call_id, in_analysis=args.starts_in_reasoning)


# Checked by the template on a past reply's text; llama.cpp patches it out.
_CHANNELS_IN_CONTENT = (
    '{%- if "<|channel|>analysis<|message|>" in message.content or '
    '"<|channel|>final<|message|>" in message.content %}'
)

HARMONY = Family(
    "harmony",
    has("<|channel|>"),
    _build,
    reasoning=ReasoningStyle("<|channel|>analysis<|message|>", "<|end|>"),
    templates=("openai-gpt-oss-120b.jinja",),
    # JSON output goes in the final channel; the model may reason in the analysis channel first.
    answer=AnswerMarkup(
        output_header=f"{CHANNEL}final{MESSAGE}",
        thought=ThoughtBlock(
            f"{CHANNEL}analysis{MESSAGE}",
            f"<|end|>{START}assistant",
            resume=f"{START}assistant",
            repeats=True,
        ),
        thought_in_grammar=True,
    ),
    quirks=Quirks(
        adjust=(thinking(drop_content_with_calls=True),), channels=True, patch=_CHANNELS_IN_CONTENT
    ),
    call=JsonCall(lambda n: f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>", ""),
)
