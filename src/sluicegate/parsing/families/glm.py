"""GLM 4.5-4.7 (and the templates that copied its calls):

<tool_call>get_weather
<arg_key>city</arg_key>
<arg_value>Paris</arg_value>
</tool_call>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader

GLM_XML = XmlCall(
    name_end=("\n", "<arg_key>", "</tool_call>"),
    key_open="<arg_key>",
    key_close="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    call_close="</tool_call>",
)

GLM = Family(
    "glm",
    has("<arg_key>"),
    markup_family(
        Markup(
            calls=(("<tool_call>", lambda tools: XmlCallReader(GLM_XML, tools)),),
            drop=("<|role_end|>",),  # Ling 3's turn end, when its GGUF does not end generation there
        )
    ),
    templates=(
        "GLM-4.6.jinja",
        "GLM-4.7-Flash.jinja",
        "Spark2.5.jinja",
        "inclusionai-ling-3.0-flash.jinja",
    ),
    call=params_call(
        lambda n: f"<tool_call>{n}\n",
        lambda k: (f"<arg_key>{k}</arg_key>\n<arg_value>", "</arg_value>\n"),
        "</tool_call>",
    ),
)
