"""A mkdocs hook: `bench/README.md` (the benchmarks' commands, methods and full results) becomes
the page `bench-results.md`, so the site links to it and the file stays where the scripts are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parent.parent / "bench" / "README.md"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "bench-results.md", content=BENCH.read_text(encoding="utf-8")))
    return files
