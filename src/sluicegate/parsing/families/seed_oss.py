"""ByteDance Seed-OSS: `<seed:think>` reasoning, Qwen3-Coder-style calls in `<seed:tool_call>`."""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.families.qwen_xml import FUNCTION_XML
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCallReader

SEED_OSS = Family(
    "seed_oss",
    has("<seed:tool_call>"),
    markup_family(
        Markup(
            calls=(("<function=", lambda tools: XmlCallReader(FUNCTION_XML, tools)),),
            drop=("<seed:tool_call>", "</seed:tool_call>"),
        )
    ),
    reasoning=ReasoningStyle("<seed:think>", "</seed:think>"),
    templates=("ByteDance-Seed-OSS.jinja",),
    call=params_call(
        lambda n: f"<seed:tool_call>\n<function={n}>\n",
        lambda k: (f"<parameter={k}>", "</parameter>\n"),
        "</function>\n</seed:tool_call>",
    ),
)
