"""The toy dialect "installed": the metadata pip would write for a package that declares it in
the `sluicegate.dialects` entry point group. A folder holding it, put on `sys.path` (or
`PYTHONPATH`), is all it takes for the server to find the dialect."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # where `toy_dialect` itself is importable from


def install(folder: Path) -> Path:
    """Write the toy package's distribution metadata into `folder`; returns `folder`."""
    info = folder / "toy_dialect-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dialect\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[sluicegate.dialects]\ntoy = toy_dialect.registration:REGISTRATION\n"
    )
    return folder
