"""MiniMax M2:

<minimax:tool_call>
<invoke name="get_weather">
<parameter name="city">Paris</parameter>
</invoke>
</minimax:tool_call>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader

INVOKE_XML = XmlCall(
    name_end=('">',),
    key_open='<parameter name="',
    key_close='">',
    value_close="</parameter>",
    call_close="</invoke>",
)

MINIMAX_M2 = Family(
    "minimax_m2",
    has("<minimax:tool_call>"),
    markup_family(
        Markup(
            calls=(('<invoke name="', lambda tools: XmlCallReader(INVOKE_XML, tools)),),
            drop=("<minimax:tool_call>", "</minimax:tool_call>"),
        )
    ),
    templates=("MiniMax-M2.jinja",),
    call=params_call(
        lambda n: f'<minimax:tool_call>\n<invoke name="{n}">\n',
        lambda k: (f'<parameter name="{k}">', "</parameter>\n"),
        "</invoke>\n</minimax:tool_call>",
    ),
)
