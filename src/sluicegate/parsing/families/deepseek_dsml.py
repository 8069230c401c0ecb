# ruff: noqa: RUF001, RUF002  (DeepSeek's tokens are written with full-width bars on purpose)
"""DeepSeek V3.2 and V4: DSML calls (V4 names the block `tool_calls`, V3.2 `function_calls`),
`<think>` reasoning, which a call's block also ends:

<｜DSML｜function_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜function_calls>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, markup_family
from sluicegate.parsing.forced import ParamsCall
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.quirks import Quirks, tool_results_in_call_order
from sluicegate.parsing.readers import XmlCall, XmlCallReader

DSML = "｜DSML｜"
INVOKE = f'<{DSML}invoke name="'
BLOCKS = ("function_calls", "tool_calls")  # V3.2, V4


def string_attr(text: str) -> tuple[str, bool | None]:
    """`city" string="true` → ("city", True): the attribute says whether the value is text."""
    key, _, attrs = text.partition('"')
    if 'string="true' in attrs:
        return key, True
    return key, False if 'string="false' in attrs else None


DSML_XML = XmlCall(
    name_end=('">',),
    key_open=f'<{DSML}parameter name="',
    key_close='">',
    value_close=f"</{DSML}parameter>",
    call_close=f"</{DSML}invoke>",
    key_attrs=string_attr,
)


def _dsml(source: str) -> bool:
    return "dsml_token" in source and "DSML" in source and any(b in source for b in BLOCKS)


_MARKUP = markup_family(
    Markup(
        calls=((INVOKE, lambda tools: XmlCallReader(DSML_XML, tools)),),
        # (a stray `</think>` where the prompt closed the block is markup, not text)
        drop=(*(t for b in BLOCKS for t in (f"<{DSML}{b}>", f"</{DSML}{b}>")), "</think>"),
        calls_end_reasoning=True,
    )
)


def _dsml_param(key: str, plain: bool) -> tuple[str, str]:
    attr = "true" if plain else "false"
    return f'<{DSML}parameter name="{key}" string="{attr}">', f"</{DSML}parameter>\n"


def _dsml_call(block: str) -> ParamsCall:
    return ParamsCall(
        lambda n: f'<{DSML}{block}>\n{INVOKE}{n}">\n', _dsml_param, f"</{DSML}invoke>\n</{DSML}{block}>"
    )


# Both read either block name; the forced-call grammar writes the family's own.
DEEPSEEK_V3_2 = Family(
    "deepseek_v3_2",
    lambda s: _dsml(s) and "function_calls" in s,
    _MARKUP,
    templates=("deepseek-ai-DeepSeek-V3.2.jinja",),
    call=_dsml_call("function_calls"),
)
DEEPSEEK_V4 = Family(
    "deepseek_v4",
    lambda s: _dsml(s) and "function_calls" not in s,
    _MARKUP,
    templates=("deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"),
    call=_dsml_call("tool_calls"),
    quirks=Quirks(adjust=(tool_results_in_call_order,)),  # V4 wants its results in call order
)
