"""MiniCPM 5: XML calls, a value maybe in CDATA; `<think>` reasoning:

<function name="python"><param name="code"><![CDATA[print('hi')]]></param></function>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader

MINICPM5_XML = XmlCall(
    name_end=('">',),
    key_open='<param name="',
    key_close='">',
    value_close="</param>",
    call_close="</function>",
    cdata=True,
)

MINICPM5 = Family(
    "minicpm5",
    has("Tool usage guidelines:", '<function name="', '<param name="'),
    markup_family(
        Markup(
            calls=(('<function name="', lambda tools: XmlCallReader(MINICPM5_XML, tools)),),
            calls_end_reasoning=True,
        )
    ),
    templates=("openbmb-MiniCPM5-1B.jinja",),
    call=params_call(
        lambda n: f'<function name="{n}">', lambda k: (f'<param name="{k}">', "</param>"), "</function>"
    ),
)
