"""The official JSON Schema Test Suite, from the sdist of the installed `jsonschema` (which
vendors the suite under `json/`, MIT licensed), kept in a cache directory so the repository need
not commit it. `$JSON_SCHEMA_TEST_SUITE` (a checkout of the suite) takes precedence."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from llamacpp_sources import _PIP_DOWNLOAD, CACHE, SourcesUnavailable

_KEEP = re.compile(r"^[^/]+/json/(LICENSE|tests/draft2020-12/.+\.json)$")


def draft2020_12() -> Path:
    """The suite's `tests/draft2020-12` folder (keyword groups, and `optional/format/`)."""
    if named := os.environ.get("JSON_SCHEMA_TEST_SUITE"):
        return Path(named) / "tests" / "draft2020-12"
    version = importlib.metadata.version("jsonschema")
    root = CACHE / f"jsonschema-{version}-suite"
    tests = root / "tests" / "draft2020-12"
    if (tests / "enum.json").is_file():
        return tests
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        done = subprocess.run(
            [*_PIP_DOWNLOAD, f"jsonschema=={version}", "-d", scratch],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(Path(scratch).glob("*.tar.gz"))
        if done.returncode or not archives:
            raise SourcesUnavailable(f"pip download jsonschema=={version} failed: {done.stderr[-500:]}")
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archives[0]) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and _KEEP.match(m.name)]
            archive.extractall(unpacked, members=members, filter="data")
        (top,) = list(unpacked.iterdir())
        try:
            (top / "json").rename(root)
        except OSError:  # another run put it there first
            shutil.rmtree(top, ignore_errors=True)
    return tests
