"""The module-level names a relayed token reads are `Final`: compiled (mypyc), a `Final` module
name is a C static, any other a lookup in the module's dict on every read (~130 instructions
each; `orjson.loads` an attribute lookup on the module besides). A paced token read six such
names (bench/README.md, gateway "Round sixteen": ~2 k of its ~24.5 k instructions went with
these and the encoder's per-read bound method). This checks the declarations, read from the
source (the pure build runs the same code either way)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sluicegate import _compiled

SRC = Path(_compiled.__file__).resolve().parent

# (module, name) read on every relayed token's path (the fast lane's read).
PER_TOKEN = [
    ("engines/upstream/http.py", "_STARTS"),  # `data_received`: is a start ahead of the lanes?
    ("engines/upstream/wire.py", "_MESSAGE"),  # the plain chunk's TextDelta
    ("engines/upstream/wire.py", "_loads"),  # the plain chunk's text
    ("core/segmenter.py", "_REASONING"),
    ("core/segmenter.py", "COMPACT_PARTS"),
    ("core/accumulate.py", "_REASONING"),
    ("turn/pipeline.py", "_LANE_READS"),  # the carried read's counter
    ("dialects/chat_completions/encoder.py", "_MESSAGE"),
    ("dialects/chat_completions/encoder.py", "_dumps"),  # the delta's text
]


def _declared_final(path: Path, name: str) -> bool | None:
    """True: `name: Final = ...` at the module's top level; False: assigned otherwise; None:
    not assigned there."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            annotation = node.annotation
            return isinstance(annotation, ast.Name) and annotation.id == "Final"
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return False
    return None


@pytest.mark.parametrize(("module", "name"), PER_TOKEN)
def test_a_name_read_per_token_is_final(module: str, name: str) -> None:
    path = SRC / module
    module_name = "sluicegate." + module.removesuffix(".py").replace("/", ".")
    assert module_name in _compiled.COMPILED  # else `Final` buys nothing: the test list is stale
    assert _declared_final(path, name) is True, f"{module}: {name} is read per token; declare it Final"
