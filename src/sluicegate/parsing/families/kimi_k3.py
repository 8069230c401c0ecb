"""Kimi K3: sections in `<|open|>TAG ATTRS<|sep|>` … `<|close|>TAG<|sep|>` (the generation
prompt opens `think`); the answer in `response`, calls in `tools`:

<|open|>response<|sep|>On it.<|close|>response<|sep|><|open|>tools<|sep|>
<|open|>call tool="get_weather" index="1"<|sep|>
<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import ParamsCall
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader


def open_tag(tag: str) -> str:
    return f"<|open|>{tag}<|sep|>"


def close_tag(tag: str) -> str:
    return f"<|close|>{tag}<|sep|>"


def _key(text: str) -> tuple[str, bool | None]:
    """`city" type="string` → the key; its type is the schema's (as llama.cpp reads it)."""
    return text.partition('"')[0], None


def _k3_param(key: str, plain: bool) -> tuple[str, str]:
    kind = "string" if plain else "json"
    return f'<|open|>argument key="{key}" type="{kind}"<|sep|>', "<|close|>argument<|sep|>"


K3_XML = XmlCall(
    name_end=('"',),  # then ` index="1"<|sep|>`, skipped as text between parameters
    key_open='<|open|>argument key="',
    key_close="<|sep|>",
    value_close=close_tag("argument"),
    call_close=close_tag("call"),
    key_attrs=_key,
)

KIMI_K3 = Family(
    "kimi_k3",
    has("<|open|>", "<|close|>", "<|end_of_msg|>"),
    markup_family(
        Markup(
            calls=(('<|open|>call tool="', lambda tools: XmlCallReader(K3_XML, tools)),),
            drop=(
                '<|open|>message role="assistant"<|sep|>',
                open_tag("response"),
                close_tag("response"),
                open_tag("tools"),
                close_tag("tools"),
                close_tag("message"),
                "<|end_of_msg|>",
            ),
            calls_end_reasoning=True,  # the response's or the tools' opener ends an unclosed think
        )
    ),
    reasoning=ReasoningStyle(open_tag("think"), close_tag("think")),
    templates=("Kimi-K3.jinja",),
    reasoning_built=True,
    call=ParamsCall(
        lambda n: f'<|open|>tools<|sep|><|open|>call tool="{n}" index="1"<|sep|>',
        _k3_param,
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
    ),
)
