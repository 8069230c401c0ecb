"""The official JSON Schema Test Suite, from the sdist of the installed `jsonschema` (which
vendors the suite under `json/`, MIT licensed), kept in a cache directory so the repository need
not commit it. `$JSON_SCHEMA_TEST_SUITE` (a checkout of the suite) takes precedence."""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

from llamacpp_sources import CACHE, SourcesUnavailable, sdist_files

_KEEP = re.compile(r"^[^/]+/json/(LICENSE|tests/draft2020-12/.+\.json)$")


def draft2020_12() -> Path:
    """The suite's `tests/draft2020-12` folder (keyword groups, and `optional/format/`)."""
    if named := os.environ.get("JSON_SCHEMA_TEST_SUITE"):
        return Path(named) / "tests" / "draft2020-12"
    version = importlib.metadata.version("jsonschema")
    tests = (
        sdist_files("jsonschema", _KEEP, CACHE / f"jsonschema-{version}-sdist")
        / "json"
        / "tests"
        / "draft2020-12"
    )
    if not (tests / "enum.json").is_file():
        raise SourcesUnavailable(f"{tests} holds no JSON Schema Test Suite")
    return tests
