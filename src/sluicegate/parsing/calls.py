"""Turning the JSON a model wrote for a tool call into a name and JSON argument text.

Arguments always leave here as JSON text (re-serialized with orjson, so a client gets valid
JSON). When the model's JSON is broken, the call still leaves, with the best name that can be
read and the raw text as its arguments, so that the dialects report an invalid call instead of
the markup leaking into the message.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


def arguments_text(value: Any) -> str:
    """JSON text for arguments the model gave as an object (or as JSON text already)."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def call_from_object(obj: Any, *, strict: bool) -> tuple[str, str] | None:
    """(name, arguments) from `{"name": ..., "arguments"|"parameters": ...}`, also when wrapped
    as `{"type": "function", "function": {...}}`. `strict` requires the arguments key too, for
    formats where a plain JSON answer could otherwise pass for a call (Llama 3)."""
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    if isinstance(inner, dict) and "name" in inner:
        obj = inner
    name = obj.get("name")
    if not isinstance(name, str):
        return None
    for key in ("arguments", "parameters"):
        if key in obj:
            return name, arguments_text(obj[key])
    return None if strict else (name, "{}")


INVALID: Any = object()  # what parse_json returns for text that is not JSON


def parse_json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return INVALID


def name_in(raw: str) -> str | None:
    """The value of the first `"name": "..."` in broken JSON, if there is one."""
    m = _NAME.search(raw)
    if m is None:
        return None
    try:
        name = orjson.loads(f'"{m.group(1)}"')
    except orjson.JSONDecodeError:
        return m.group(1)
    return name if isinstance(name, str) else None


def broken_call(raw: str) -> tuple[str, str]:
    """A call whose JSON did not parse: the name it seems to have, the raw text as arguments."""
    return name_in(raw) or "", raw.strip()
