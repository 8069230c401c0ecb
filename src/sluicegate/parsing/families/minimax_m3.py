"""MiniMax M3: every tool tag behind the namespace token `]<]minimax[>[`, each parameter in a
tag of its own name, objects and arrays spelled out in nested tags as the tool's schema shapes
them (`<item>` for array items); `<mm:think>` reasoning:

]<]minimax[>[<tool_call>
]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>
]<]minimax[>[</tool_call>

The values' shape comes from the schema, so a call is read whole when its `</invoke>` arrives.
"""

from __future__ import annotations

from typing import Any

from sluicegate.parsing.calls import INVALID, parse_json
from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import compact
from sluicegate.parsing.markup import CallOut, Markup, Tools
from sluicegate.parsing.readers import BufferedReader, markup_value

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


def m3_call(raw: str, tools: Tools) -> list[tuple[str, str]] | None:
    """`NAME">` and the parameters' tags (the text between `<invoke name="` and `</invoke>`)."""
    name, sep, body = raw.partition('">')
    name = name.strip()
    if not sep or not name:
        return None
    schema = tools.get(name) or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    found = _members(props if isinstance(props, dict) else {}, body + INVOKE_END, INVOKE_END)
    if found is None or found[1].strip():
        return [(name, body.strip())]  # not what the schema says: an invalid call
    return [(name, compact(found[0]))]


class _InvokeReader(BufferedReader):
    """A call cut off before `</invoke>` keeps its name (its arguments, unfinished, are invalid)."""

    def __init__(self, tools: Tools) -> None:
        super().__init__(INVOKE_END, lambda raw: m3_call(raw, tools))

    def close(self, out: CallOut) -> None:
        name, sep, body = self._buf.partition('">')
        if sep and name.strip():
            out.call(name.strip(), body.strip() or "{")
        else:
            super().close(out)


MINIMAX_M3 = Family(
    "minimax_m3",
    has(NS, "<invoke name="),
    markup_family(
        Markup(
            calls=((INVOKE, _InvokeReader),),
            drop=(f"{NS}<tool_call>", f"{NS}</tool_call>", "</mm:think>"),
        )
    ),
    reasoning=ReasoningStyle("<mm:think>", "</mm:think>"),
    templates=("MiniMax-M3.jinja",),
)
