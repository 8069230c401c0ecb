"""Liquid LFM2 / LFM2.5: Python-style calls between tokens,
`<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`; `<think>` reasoning."""

from __future__ import annotations

import ast
from typing import Any

from sluicegate.parsing.families.base import Family, markup_family
from sluicegate.parsing.jsonstream import compact
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import BufferedReader


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[node.id]
    return ast.literal_eval(node)


def python_calls(raw: str) -> list[tuple[str, str]] | None:
    """`[f(a=1), g(b="x")]` (or one call without the list) as (name, JSON arguments)s."""
    try:
        tree = ast.parse(raw.strip(), mode="eval").body
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in nodes:
            if not isinstance(node, ast.Call) or node.args:
                return None
            name = ast.unparse(node.func)
            calls.append((name, compact({kw.arg: _literal(kw.value) for kw in node.keywords})))
        return calls
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


LFM2 = Family(
    "lfm2",
    lambda s: "<|tool_list_start|>" in s or "List of tools: [" in s or "<|tool_call_start|>" in s,
    markup_family(
        Markup(
            calls=(("<|tool_call_start|>", lambda tools: BufferedReader("<|tool_call_end|>", python_calls)),)
        )
    ),
    templates=("LFM2-8B-A1B.jinja", "LFM2.5-Instruct.jinja", "LFM2.5-8B-A1B.jinja"),
)
