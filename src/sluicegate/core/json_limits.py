"""How deeply a client's JSON may nest: one limit, checked once, right after the body is parsed.

Everything after parsing may walk client JSON recursively (orjson re-encoding it for an upstream
or the store stops at 255 levels, jsonschema and Jinja recurse in Python), so a body nested
beyond `max_json_depth` is refused with a 400 before any of them sees it. The check itself is
iterative: a hostile body cannot make it overflow the stack.
"""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.errors import invalid

DEFAULT_MAX_JSON_DEPTH = 64


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` has containers nested more than `limit` deep (a scalar is depth 0, `{}` 1)."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def may_nest_deeper(text: bytes | str, limit: int) -> bool:
    """Whether JSON `text` could nest more than `limit` deep: not when it holds no more opening
    brackets than that (brackets inside strings only add to the count). Two scans in C, so
    most request bodies skip the walk over their parsed value."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[") > limit
    return text.count("{") + text.count("[") > limit


def check_json_depth(value: Any, limit: int) -> None:
    """Raise a 400 for JSON nested deeper than `limit` (`max_json_depth`); 0 disables the check."""
    if limit and json_depth_exceeds(value, limit):
        raise invalid(
            f"The request body nests JSON more than {limit} levels deep (max_json_depth).",
            code="json_too_deep",
        )


HTTP_HINT = "Send valid JSON with Content-Type: application/json."


def parse_json(
    body: bytes | str, max_depth: int, *, what: str = "request body", hint: str = HTTP_HINT
) -> Any:
    """A client's JSON, with every check a body gets (empty, invalid JSON or UTF-8, nesting past
    `max_json_depth`): one parser for every transport (HTTP bodies, WebSocket messages)."""
    if not body.strip():
        raise invalid(f"The {what} is empty; expected a JSON object.")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(
            f"We could not parse the JSON {what.split()[-1]} of your request ({exc.msg} at position {exc.pos}). {hint}"
        ) from exc
    if may_nest_deeper(body, max_depth):  # one limit, applied once
        check_json_depth(value, max_depth)
    return value
