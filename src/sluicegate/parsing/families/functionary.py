"""Functionary v3.1 (`<function=NAME>{...}</function>`, on Llama 3.1) and v3.2, where every
message starts with its recipient: `all\n` text, or `NAME\n{...}`, further ones after `>>>`."""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import JsonCall
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import NameJson, NameJsonReader

V3_1 = NameJson(name_end=(">",), close="</function>")
V3_2 = NameJson(name_end=("\n",), content_names=frozenset({"all"}))

FUNCTIONARY_V3_1 = Family(
    "functionary_v3_1",
    lambda s: "<function=" in s and "<parameter=" not in s,
    markup_family(
        Markup(
            calls=(("<function=", lambda tools: NameJsonReader(V3_1)),), drop=("<|python_tag|>", "<|eom_id|>")
        )
    ),
    templates=("meetkai-functionary-medium-v3.1.jinja",),
    call=JsonCall(lambda n: f"<function={n}>", "</function>"),
)
FUNCTIONARY_V3_2 = Family(
    "functionary_v3_2",
    has(">>>all"),
    markup_family(Markup(calls=((">>>", lambda tools: NameJsonReader(V3_2)),), starts_with=">>>")),
    templates=("meetkai-functionary-medium-v3.2.jinja",),
    call=JsonCall(lambda n: f"{n}\n", ""),
)
