"""Tencent Hy3: GLM's key/value calls in tokens of its own (`:opensource` in each), and
`<think:opensource>` reasoning:

<tool_calls:opensource>
<tool_call:opensource>get_weather<tool_sep:opensource>
<arg_key:opensource>city</arg_key:opensource>
<arg_value:opensource>Paris</arg_value:opensource>
</tool_call:opensource>
</tool_calls:opensource>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader


def token(name: str) -> str:
    return f"<{name}:opensource>"


HY3_XML = XmlCall(
    name_end=(token("tool_sep"),),
    key_open=token("arg_key"),
    key_close=token("/arg_key"),
    value_open=token("arg_value"),
    value_close=token("/arg_value"),
    call_close=token("/tool_call"),
)

HY3 = Family(
    "hy3",
    has("toolsep_token", "hy_Assistant"),  # the template builds its tokens with .format()
    markup_family(
        Markup(
            calls=((token("tool_call"), lambda tools: XmlCallReader(HY3_XML, tools)),),
            drop=(token("tool_calls"), token("/tool_calls"), "<｜hy_eos:opensource｜>"),  # noqa: RUF001
            calls_end_reasoning=True,
        )
    ),
    reasoning=ReasoningStyle(token("think"), token("/think")),
    templates=("tencent-Hy3.jinja",),
    reasoning_built=True,
    call=params_call(
        lambda n: f"{token('tool_calls')}\n{token('tool_call')}{n}{token('tool_sep')}\n",
        lambda k: (
            f"{token('arg_key')}{k}{token('/arg_key')}\n{token('arg_value')}",
            f"{token('/arg_value')}\n",
        ),
        f"{token('/tool_call')}\n{token('/tool_calls')}",
    ),
)
