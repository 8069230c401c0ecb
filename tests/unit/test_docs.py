"""The documentation stays true: the configuration reference covers every key the loader
accepts, the architecture page names only paths that exist, the README stays a front door,
and the site builds with `mkdocs build --strict` (broken links and missing pages fail it)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sluicegate import _compiled, config
from sluicegate.config import load_settings
from sluicegate.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def gen_config() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config", DOCS / "gen_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the configuration reference -------------------------------------------------------------


def test_every_key_the_code_accepts_is_described_and_nothing_else() -> None:
    assert gen_config().drift() == []


def test_a_key_added_to_the_loader_without_a_description_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(config._SERVER_KEYS, "brand_new_key", int)
    monkeypatch.setattr(config, "STORE_KEYS", (*config.STORE_KEYS, "another_new_key"))
    problems = gen_config().drift()
    assert "[server] brand_new_key: accepted by the code, missing here" in problems
    assert "[store] another_new_key: accepted by the code, missing here" in problems


@pytest.mark.parametrize("table", sorted(config.table_keys()))
def test_the_key_lists_are_what_the_loader_gates_on(tmp_path: Path, table: str) -> None:
    """A key outside a table's list is refused, so the list the reference is checked against is
    the loader's whole truth."""
    path = tmp_path / "sluicegate.toml"
    path.write_text(f"[{table}]\nno_such_key = 1\n")
    with pytest.raises(ConfigError):
        load_settings(path, env={})


def test_the_configuration_page_renders_every_key() -> None:
    module = gen_config()
    page = module.expand((DOCS / "configuration.md").read_text())
    assert "<!-- config-keys" not in page
    for table, keys in module.code_keys().items():
        for key in keys:
            assert f"| `{key}` |" in page, f"[{table}] {key} is not on docs/configuration.md"


# --- paths and links -----------------------------------------------------------------------------

PATH = re.compile(r"`((?:src|tests|bench|docs|examples)/[\w./-]+|pyproject\.toml|\.ci/run)`")
OTHER_PROJECTS = (".cpp", ".h")  # llama.cpp's `tests/test-chat.cpp` and the like: not ours


# What only the build writes, declared once: `setup.py` writes `_compiled.py`'s MANIFEST beside
# the compiled modules (docs/compiled.md, "Building"). A page may name it on a tree never built.
BUILD_OUTPUTS = frozenset({f"src/sluicegate/{_compiled.MANIFEST}"})


def repository_paths(text: str) -> set[str]:
    return {p for p in PATH.findall(text) if not p.endswith(OTHER_PROJECTS)}


def missing_paths(text: str) -> list[str]:
    """The repository paths `text` names that are neither in the tree nor a build output."""
    return sorted(p for p in repository_paths(text) if p not in BUILD_OUTPUTS and not (ROOT / p).exists())


def test_every_path_the_architecture_page_names_exists() -> None:
    text = (DOCS / "architecture.md").read_text()
    assert len(repository_paths(text)) > 30  # the pattern still finds them
    assert missing_paths(text) == []


@pytest.mark.parametrize("page", [*sorted(p.name for p in DOCS.glob("*.md")), "../README.md"])
def test_every_repository_path_a_page_names_exists(page: str) -> None:
    assert missing_paths((DOCS / page).read_text()) == [], f"docs/{page} names paths that do not exist"


def test_only_the_declared_build_output_may_be_missing() -> None:
    """The manifest counts as named on a tree never built; a path beside it, or one made up, does not."""
    manifest = f"src/sluicegate/{_compiled.MANIFEST}"
    assert missing_paths(f"the record `{manifest}`") == []
    made_up = ["src/sluicegate/_compiled_built.json", "src/sluicegate/no_such_module.py"]
    assert missing_paths(" ".join(f"`{p}`" for p in made_up)) == made_up
    assert manifest in repository_paths((DOCS / "compiled.md").read_text())  # the case this is for


def test_the_readme_is_a_front_door_with_no_link_leaving_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "pip install -e '.[test]' && pytest" in readme  # the command .ci/run runs
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert "://" not in target, f"README links outside the repository: {target}"
        resolved = (ROOT / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"README links to a missing {target}"


# --- the site ------------------------------------------------------------------------------------


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs is not None, "mkdocs comes with the test extra"
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "configuration" / "index.html").exists()
