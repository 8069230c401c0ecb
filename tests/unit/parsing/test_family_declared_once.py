"""A model family is declared once: its name (as a string) and its declaration's name (as an
identifier) appear in its own module and on its one line of the registry, nowhere else in
src/; and only the registry imports the family modules. Everything else (the engine's grammars,
template quirks, fallback templates) reads the declaration."""

from __future__ import annotations

import ast
import importlib
import io
import tokenize
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from sluicegate.parsing import FAMILIES
from sluicegate.parsing.registry import _DECLARED

SRC = Path(__file__).resolve().parents[3] / "src" / "sluicegate"
REGISTRY = SRC / "parsing" / "registry.py"
FAMILY_DIR = SRC / "parsing" / "families"


@cache
def _tokens() -> dict[Path, list[tuple[int, int, str]]]:
    """Every source file's identifiers and string values, with their line."""
    out: dict[Path, list[tuple[int, int, str]]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.NAME:
                out[path].append((tok.type, tok.start[0], tok.string))
            elif tok.type == tokenize.STRING:
                try:
                    value = ast.literal_eval(tok.string)
                except (ValueError, SyntaxError):  # f-strings: their parts are not the name
                    continue
                if isinstance(value, str):
                    out[path].append((tok.type, tok.start[0], value))
    return out


def _where(kind: int, text: str) -> set[tuple[Path, int]]:
    return {
        (path, line) for path, tokens in _tokens().items() for k, line, s in tokens if k == kind and s == text
    }


@pytest.mark.parametrize("entry", _DECLARED)
def test_a_family_appears_in_its_module_and_its_registry_line_only(entry: str) -> None:
    module, _, constant = entry.partition(":")
    own = FAMILY_DIR / f"{module}.py"
    family = getattr(importlib.import_module(f"sluicegate.parsing.families.{module}"), constant)
    # The family's name as a string, and its declaration as an identifier: in its module only.
    named = {path for path, _ in _where(tokenize.STRING, family.name)}
    assert named <= {own}, f"{family.name!r} written outside {own.name}: {sorted(map(str, named - {own}))}"
    used = {path for path, _ in _where(tokenize.NAME, constant)}
    assert used <= {own}, f"{constant} used outside {own.name}: {sorted(map(str, used - {own}))}"
    # The registry names it on one line.
    assert sum(f'"{entry}"' in line for line in REGISTRY.read_text().splitlines()) == 1


def test_the_registry_lists_each_family_once() -> None:
    assert len(_DECLARED) == len(set(_DECLARED)) == len(FAMILIES)
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)


def test_only_the_registry_imports_the_family_modules() -> None:
    """Outside parsing/families/, nothing but the registry imports a family's module (the
    declaration's type, families/base.py, is everyone's)."""
    modules = {entry.partition(":")[0] for entry in _DECLARED}
    importers = set()
    for path in _tokens():
        if path.parent == FAMILY_DIR or path == REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if any(
                    n.startswith("sluicegate.parsing.families.") and n.split(".")[3] in modules for n in names
                ):
                    importers.add(str(path.relative_to(SRC)))
    assert importers == set()
