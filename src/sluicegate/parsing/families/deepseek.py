# ruff: noqa: RUF001, RUF002  (DeepSeek's tokens are written with full-width bars on purpose)
"""DeepSeek R1 and V3 / V3.1 (`<think>` reasoning; calls in full-width-bar tokens):

V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
R1:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
      ```json
      {...}
      ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import JsonCall
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import JsonCallsReader, NameJson, NameJsonReader

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

V3_1 = NameJson(name_end=(SEP,), close=CALL_END)


def _r1_name(text: str) -> str:
    """`function<｜tool▁sep｜>NAME` → `NAME`."""
    return text.rpartition(SEP)[2].strip()


R1 = NameJson(name_end=("\n",), close=CALL_END, clean_name=_r1_name, skip_before_args="```json")


def _r1_reader(tools: object) -> NameJsonReader:
    return NameJsonReader(R1)


DEEPSEEK_V3_1 = Family(
    "deepseek_v3_1",
    lambda s: SEP in s and "```json" not in s,
    markup_family(
        Markup(calls=((CALL_BEGIN, lambda tools: NameJsonReader(V3_1)),), drop=(CALLS_BEGIN, CALLS_END))
    ),
    templates=("deepseek-ai-DeepSeek-V3.1.jinja",),
    call=JsonCall(lambda n: f"{CALLS_BEGIN}{CALL_BEGIN}{n}{SEP}", CALL_END + CALLS_END),
)
DEEPSEEK_R1 = Family(
    "deepseek_r1",
    has(SEP, "```json"),
    markup_family(
        Markup(
            # R1 distills of Qwen also write Hermes calls.
            calls=((CALL_BEGIN, _r1_reader), ("<tool_call>", lambda tools: JsonCallsReader("</tool_call>"))),
            drop=(CALLS_BEGIN, CALLS_END),
        )
    ),
    templates=(
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "llama-cpp-deepseek-r1.jinja",
    ),
    call=JsonCall(
        lambda n: f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}{n}\n```json\n", f"\n```{CALL_END}{CALLS_END}"
    ),
)
