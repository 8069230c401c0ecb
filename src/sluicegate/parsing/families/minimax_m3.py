"""MiniMax M3: every tool tag behind the namespace token `]<]minimax[>[`, each parameter in a
tag of its own name, objects and arrays spelled out in nested tags as the tool's schema shapes
them (`<item>` for array items); `<mm:think>` reasoning:

]<]minimax[>[<tool_call>
]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>
]<]minimax[>[</tool_call>

A parameter the schema lets be a string streams as it is written; other values leave when their
tag closes, shaped by the schema.
"""

from __future__ import annotations

from typing import Any

from sluicegate.parsing.calls import INVALID, parse_json
from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import compact
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader, markup_value

NS = "]<]minimax[>["
INVOKE = f'{NS}<invoke name="'
INVOKE_END = f"{NS}</invoke>"

_Read = tuple[Any, str] | None  # a value and the text after its closing tag


def _alternatives(schema: dict[str, Any]) -> list[Any]:
    alts = schema.get("anyOf") or schema.get("oneOf")
    return alts if isinstance(alts, list) else []


def _may_be_string(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    return any(_may_be_string(alt) for alt in _alternatives(schema))


def _value(schema: Any, text: str, close: str) -> _Read:
    """The value of a tag whose closing tag is `close`, as `schema` shapes it."""
    schema = schema if isinstance(schema, dict) else {}
    if _may_be_string(schema):
        i = text.find(close)
        return None if i == -1 else (text[:i], text[i + len(close) :])
    for alt in _alternatives(schema):
        found = _value(alt, text, close)
        if found is not None:
            return found
    props = schema.get("properties")
    nested = text.lstrip().startswith(NS + "<")  # else JSON (as the forced-call grammar writes it)
    if nested and schema.get("type") == "object" and isinstance(props, dict) and props:
        return _members(props, text, close)
    if nested and schema.get("type") == "array":
        return _items(schema.get("items"), text, close)
    if not schema and text.lstrip().startswith(NS + "<"):  # no schema: nested tags are an object
        found = _members({}, text, close)
        if found is not None:
            return found
    i = text.find(close)
    if i == -1:
        return None
    raw = text[:i]
    value = parse_json(raw.strip()) if schema else markup_value(raw)
    return None if value is INVALID else (value, text[i + len(close) :])


def _members(props: dict[str, Any], text: str, close: str) -> _Read:
    out: dict[str, Any] = {}
    while True:
        text = text.lstrip()
        if text.startswith(close):
            return out, text[len(close) :]
        if not text.startswith(NS + "<"):
            return None
        tag, sep, rest = text[len(NS) + 1 :].partition(">")
        if not sep or not tag or tag.startswith("/"):
            return None
        found = _value(props.get(tag, {}), rest, f"{NS}</{tag}>")
        if found is None:
            return None
        out[tag], text = found


def _items(schema: Any, text: str, close: str) -> _Read:
    out: list[Any] = []
    item = f"{NS}<item>"
    while True:
        text = text.lstrip()
        if text.startswith(close):
            return out, text[len(close) :]
        if not text.startswith(item):
            return None
        found = _value(schema, text[len(item) :], f"{NS}</item>")
        if found is None:
            return None
        value, text = found
        out.append(value)


def read_value(schema: Any, text: str) -> str:
    """A parameter's value (the text inside its tag) as JSON text; the text itself, which is not
    JSON, when it is not what the schema says (an invalid call)."""
    found = _value(schema, text + _END, _END)
    return text if found is None or found[1] else compact(found[0])


_END = f"{NS}</>"  # a closing tag no parameter has, to read one value alone

M3_XML = XmlCall(
    name_end=('">',),
    key_open=NS + "<",
    key_close=">",
    value_close="",
    call_close=INVOKE_END,
    value_close_for=lambda key: f"{NS}</{key}>",
    is_text=_may_be_string,
    read_value=read_value,
)


MINIMAX_M3 = Family(
    "minimax_m3",
    has(NS, "<invoke name="),
    markup_family(
        Markup(
            calls=((INVOKE, lambda tools: XmlCallReader(M3_XML, tools)),),
            drop=(f"{NS}<tool_call>", f"{NS}</tool_call>", "</mm:think>"),
        )
    ),
    reasoning=ReasoningStyle("<mm:think>", "</mm:think>"),
    templates=("MiniMax-M3.jinja",),
    call=params_call(
        lambda n: f'{NS}<tool_call>\n{INVOKE}{n}">',
        lambda k: (f"{NS}<{k}>", f"{NS}</{k}>"),
        f"{INVOKE_END}\n{NS}</tool_call>",
    ),
)
