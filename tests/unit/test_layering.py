"""The import-linter contracts catch what they promise to catch, each its own rule.

The package is copied to a temporary folder once. Each case plants forbidden imports (or a new
module) in the copy, runs `lint-imports` against it with the project's own contracts, and reads
the verdict of every contract: exactly the contract the case names is BROKEN, every other one
KEPT. So a plant that breaks a different contract, or more than one, fails the case; and every
contract in `pyproject.toml` must have a case, so none can silently stop checking.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS: list[str] = [
    c["name"]
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
]
VERDICT = re.compile(r"^(?P<name>.+?) (?P<verdict>KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")

LAYERS = "layers"
DIALECTS = "no dialect imports another"
CONVERSATION = "the conversation knows no dialect"
PARSERS = "no dialect sees the model's output parsers"

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="lint-imports is not installed")


@dataclass(frozen=True)
class Plant:
    """`lines` appended to `module` (a package means its `__init__.py`), created if missing."""

    module: str
    lines: tuple[str, ...]

    def path(self, tree: Path) -> Path:
        base = tree / "src" / Path(*self.module.split("."))
        return (
            base / "__init__.py"
            if base.is_dir() or not base.with_suffix(".py").exists()
            else base.with_suffix(".py")
        )


def imports(module: str, *imported: str) -> Plant:
    return Plant(module, tuple(f"import {name}" for name in imported))


def lint(tree: Path) -> dict[str, str]:
    """Each contract's verdict, by name, from `lint-imports`' report on `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "COLUMNS": "400"}  # no wrapped lines
    result = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    verdicts: dict[str, str] = {}
    for line in result.stdout.splitlines():
        match = VERDICT.match(line.strip())
        if match and match["name"] in CONTRACTS:
            assert match["name"] not in verdicts, result.stdout
            verdicts[match["name"]] = match["verdict"]
    assert set(verdicts) == set(CONTRACTS), result.stdout + result.stderr  # each reported once
    assert (result.returncode == 0) == ("BROKEN" not in verdicts.values()), result.stdout
    return verdicts


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layering")
    shutil.copytree(
        ROOT / "src" / "sluicegate",
        copy / "src" / "sluicegate",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def planted(tree: Path, plant: Plant) -> dict[str, str]:
    """The verdicts with `plant` in the copy; the copy is as it was afterwards."""
    path = plant.path(tree)
    created = [p for p in (path, *path.parents) if not p.exists() and tree in p.parents]
    original = path.read_text() if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_text(original + "".join(f"\n{line}  # planted by test_layering\n" for line in plant.lines))
        return lint(tree)
    finally:
        if created:
            shutil.rmtree(created[-1]) if created[-1].is_dir() else created[-1].unlink()
        else:
            path.write_text(original)


CASES: list[tuple[str, Plant]] = [
    # The six imports the documented architecture forbids that the contracts of wave 3 let pass.
    (LAYERS, imports("sluicegate.dialects.chat_completions.encoder", "sluicegate.store.sqlite")),
    (LAYERS, imports("sluicegate.engines.base", "sluicegate.tools.mcp")),
    (LAYERS, imports("sluicegate.store.base", "sluicegate.tools")),
    (LAYERS, imports("sluicegate.parsing", "sluicegate.observe.metrics")),
    (LAYERS, imports("sluicegate.parsing", "sluicegate.config")),
    (LAYERS, imports("sluicegate.tools.base", "sluicegate.transport")),
    # Independent siblings, both lines: no engine/dialect/tool/transport/store imports another.
    (LAYERS, imports("sluicegate.engines.scripted", "sluicegate.dialects.base")),
    (LAYERS, imports("sluicegate.dialects.ollama", "sluicegate.transport")),
    (LAYERS, imports("sluicegate.dialects.anthropic", "sluicegate.engines")),
    (LAYERS, imports("sluicegate.tools.base", "sluicegate.dialects.base")),
    (LAYERS, imports("sluicegate.tools", "sluicegate.engines.models")),
    (LAYERS, imports("sluicegate.transport", "sluicegate.store")),
    (LAYERS, imports("sluicegate.observe", "sluicegate.parsing")),
    (LAYERS, imports("sluicegate.demo", "sluicegate.config")),
    # Upwards.
    (LAYERS, imports("sluicegate.core.events", "sluicegate.engines.base")),
    (LAYERS, imports("sluicegate.observe.metrics", "sluicegate.turn")),
    (LAYERS, imports("sluicegate.turn", "sluicegate.app")),
    (LAYERS, imports("sluicegate.routes", "sluicegate.cli")),
    (LAYERS, imports("sluicegate.engines.model_files", "sluicegate.conversation")),
    (LAYERS, imports("sluicegate._compiled", "sluicegate.core")),
    # A new package that is no layer.
    (LAYERS, Plant("sluicegate.newpackage", ("import sluicegate.core",))),
    # Dialects: one another, a new one (no pyproject edit), the shared modules and the registry.
    (DIALECTS, imports("sluicegate.dialects.chat_completions", "sluicegate.dialects.anthropic")),
    (DIALECTS, imports("sluicegate.dialects.ollama.encoder", "sluicegate.dialects.chat_completions")),
    (
        DIALECTS,
        imports("sluicegate.dialects.newdialect", "sluicegate.dialects.base", "sluicegate.dialects.ollama"),
    ),
    (DIALECTS, imports("sluicegate.dialects.base", "sluicegate.dialects.responses")),
    (DIALECTS, imports("sluicegate.dialects.openai_errors", "sluicegate.dialects.completions")),
    (DIALECTS, imports("sluicegate.dialects.completions", "sluicegate.dialects.registry")),
    (CONVERSATION, imports("sluicegate.conversation", "sluicegate.dialects.base")),
    (CONVERSATION, imports("sluicegate.conversation.messages", "sluicegate.dialects.responses")),
    (PARSERS, imports("sluicegate.dialects.ollama", "sluicegate.parsing")),
    (PARSERS, imports("sluicegate.dialects.base", "sluicegate.parsing.families")),
]


def test_every_contract_has_a_case_and_the_cases_name_only_contracts() -> None:
    assert {contract for contract, _ in CASES} == set(CONTRACTS)


def test_the_untouched_copy_keeps_every_contract(tree: Path) -> None:
    assert lint(tree) == dict.fromkeys(CONTRACTS, "KEPT")


@pytest.mark.parametrize(
    ("contract", "plant"),
    CASES,
    ids=[f"{p.module}:{'+'.join(line.split()[-1] for line in p.lines)}" for _, p in CASES],
)
def test_a_planted_import_breaks_exactly_its_contract(tree: Path, contract: str, plant: Plant) -> None:
    assert planted(tree, plant) == {name: "BROKEN" if name == contract else "KEPT" for name in CONTRACTS}


def test_a_new_dialect_package_may_import_the_shared_dialect_modules(tree: Path) -> None:
    shared = ("base", "openai_errors", "embeddings", "rerank")
    plant = imports("sluicegate.dialects.newdialect", *(f"sluicegate.dialects.{name}" for name in shared))
    assert planted(tree, plant) == dict.fromkeys(CONTRACTS, "KEPT")
