"""Qwen3-Coder's XML calls, also written by Qwen3.5, Nemotron 3 Nano and StepFun 3.5:

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
</function>
</tool_call>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader

FUNCTION_XML = XmlCall(
    name_end=(">",),
    key_open="<parameter=",
    key_close=">",
    value_close="</parameter>",
    call_close="</function>",
)

QWEN3_CODER = Family(
    "qwen3_coder",
    has("<tool_call>", "<function=", "<parameter="),
    markup_family(
        Markup(
            calls=(("<function=", lambda tools: XmlCallReader(FUNCTION_XML, tools)),),
            drop=("<tool_call>", "</tool_call>"),
            calls_end_reasoning=True,
        )
    ),
    templates=(
        "Qwen3-Coder.jinja",
        "Qwen3.5-4B.jinja",
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
        "StepFun3.5-Flash.jinja",
    ),
    call=params_call(
        lambda n: f"<tool_call>\n<function={n}>\n",
        lambda k: (f"<parameter={k}>\n", "\n</parameter>\n"),
        "</function>\n</tool_call>",
    ),
)
