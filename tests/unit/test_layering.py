"""The import-linter contracts catch what they promise to catch.

Each case copies the package to a temporary folder, plants one forbidden import, and runs
`lint-imports` against the copy with the project's own contracts: it must fail, naming the
contract. The untouched copy passing is checked too, so a failure means the planted import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layering")
    shutil.copytree(
        ROOT / "src" / "sluicegate", copy / "src" / "sluicegate", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def plant(tree: Path, module: str, line: str) -> str:
    path = tree / "src" / (module.replace(".", "/") + ".py")
    original = path.read_text()
    path.write_text(original + f"\n{line}  # planted by test_layering\n")
    return original


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="lint-imports is not installed")
def test_the_real_tree_keeps_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="lint-imports is not installed")
@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "sluicegate.dialects.chat_completions.encoder",
            "import sluicegate.dialects.anthropic.encoder",
            "no dialect imports another",
        ),
        (
            "sluicegate.dialects.lmstudio.request",
            "import sluicegate.dialects.responses.items",
            "no dialect imports another",
        ),
        (
            "sluicegate.dialects.ollama.encoder",
            "import sluicegate.dialects.chat_completions.encoder",
            "no dialect imports another",
        ),
        (
            "sluicegate.dialects.ollama.request",
            "import sluicegate.transport.ndjson",
            "dialects translate: no engine, no transport",
        ),
        ("sluicegate.core.events", "import sluicegate.engines.base", "layers"),
        ("sluicegate.engines.scripted", "import sluicegate.dialects.base", "layers"),
        ("sluicegate.observe.metrics", "import sluicegate.turn.runner", "layers"),
        ("sluicegate.turn.runner", "import sluicegate.app.factory", "layers"),
    ],
)
def test_a_planted_forbidden_import_fails_the_contracts(
    tree: Path, module: str, line: str, contract: str
) -> None:
    original = plant(tree, module, line)
    try:
        result = lint(tree)
    finally:
        (tree / "src" / (module.replace(".", "/") + ".py")).write_text(original)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout
