"""No route overrides the turn runner: what a chat route does besides its turns goes through
the runner's public hooks (`TurnHooks`, named by a dialect's registration). Ollama's chat
routes once subclassed `TurnEndpoint`, overrode its private `_serve` and passed state to it
through a ContextVar."""

from __future__ import annotations

import ast
from pathlib import Path

import sluicegate

SRC = Path(sluicegate.__file__).resolve().parent


def test_nothing_in_src_subclasses_the_turn_runner() -> None:
    subclasses = [
        f"{path.relative_to(SRC)}: {node.name}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_bytes()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] == "TurnEndpoint" for base in node.bases)
    ]
    assert subclasses == []
