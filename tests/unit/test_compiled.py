"""The compiled hot path (`sluicegate/_compiled.py`, `setup.py`, docs/compiled.md).

- Compiled and pure Python write the same bytes: the frames corpus (`tests/compiled_frames.py`)
  runs in a process of each kind and the outputs are compared.
- A build is in fact loaded: with SLUICEGATE_EXPECT_COMPILED=1 (CI sets it after
  `pip install -e .`) a missing or unused build fails; elsewhere (a checkout never built) it
  skips.
- A binary older than its source is never used: one edited source sends every compiled module
  back to its `.py`, with one warning.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluicegate import _compiled

TESTS = Path(__file__).resolve().parents[1]
SRC = Path(_compiled.__file__).resolve().parents[1]
EXPECT = os.environ.get("SLUICEGATE_EXPECT_COMPILED", "") not in ("", "0")


def _run(args: list[str], *, pure: bool, pythonpath: Path = SRC) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_SWITCH}
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(TESTS)])
    if pure:
        env[_compiled.PURE_SWITCH] = "1"
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, timeout=240, check=False)


def _built(package_dir: Path = SRC / "sluicegate") -> bool:
    return (package_dir / _compiled.MANIFEST).exists()


def _report(stderr: bytes) -> dict[str, object]:
    """The last line the corpus script writes to stderr: the mode and each module's loader."""
    report: dict[str, object] = json.loads(stderr.decode().strip().splitlines()[-1])
    return report


def test_compiled_and_pure_write_identical_frames() -> None:
    if not _built():
        pytest.skip("this checkout has no compiled build (python setup.py build_ext --inplace)")
    compiled = _run([str(TESTS / "compiled_frames.py")], pure=False)
    pure = _run([str(TESTS / "compiled_frames.py")], pure=True)
    assert compiled.returncode == 0, compiled.stderr.decode()[-3000:]
    assert pure.returncode == 0, pure.stderr.decode()[-3000:]
    # Each run is what it says: every hot module compiled in one, none in the other.
    compiled_report, pure_report = _report(compiled.stderr), _report(pure.stderr)
    assert compiled_report["mode"] == "compiled", compiled.stderr.decode()[-3000:]
    assert compiled_report["loaded"] and all(compiled_report["loaded"].values())  # type: ignore[attr-defined]
    assert pure_report["loaded"] and not any(pure_report["loaded"].values())  # type: ignore[attr-defined]
    lines = compiled.stdout.splitlines()
    assert len(lines) >= 80  # every stream of the corpus through every dialect
    for mine, theirs in zip(lines, pure.stdout.splitlines(), strict=True):
        assert mine == theirs, json.loads(mine)["stream"] + " / " + json.loads(mine)["dialect"]
    assert compiled.stdout == pure.stdout


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_relaying_keeps_no_memory(pure: bool) -> None:
    """Ten passes over the corpus leave (next to) nothing allocated: a compiled module that
    leaks a reference per frame (mypyc's `bytes + bytes` did, see setup.py) keeps thousands."""
    if not pure and not _built():
        pytest.skip("this checkout has no compiled build (python setup.py build_ext --inplace)")
    run = _run([str(TESTS / "compiled_frames.py"), "--blocks", "10"], pure=pure)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    kept = json.loads(run.stdout.decode().splitlines()[-1])
    assert kept["lines"] > 5000
    assert kept["blocks"] < 1000, kept  # the leaky `bytes + bytes` build kept 7,154


def test_the_build_is_loaded() -> None:
    """Fails when CI's build did not compile (or its binaries are not the ones imported)."""
    if os.environ.get(_compiled.PURE_SWITCH, "") not in ("", "0"):
        pytest.skip(f"{_compiled.PURE_SWITCH} is set")
    if not _built() and not EXPECT:
        pytest.skip("this checkout has no compiled build (python setup.py build_ext --inplace)")
    for name in _compiled.COMPILED:
        importlib.import_module(name)
    assert _compiled.mode == "compiled"
    assert _compiled.loaded() == dict.fromkeys(_compiled.COMPILED, True)


def test_the_compiled_list_names_modules_that_exist() -> None:
    for name in _compiled.COMPILED:
        assert _compiled.source_path(name).is_file(), name


def _fake_build(package: Path) -> None:
    """A package dir as a build leaves it: sources, a binary beside each, the record."""
    for name in _compiled.COMPILED:
        source = _compiled.source_path(name, package)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {name}\n")
        source.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0]).write_bytes(b"")
    _compiled.write_manifest(package)


def test_a_source_edited_after_the_build_makes_it_stale(tmp_path: Path) -> None:
    package = tmp_path / "sluicegate"
    assert _compiled.stale(package) is None  # nothing built: nothing to shadow
    _fake_build(package)
    assert _compiled.stale(package) is None
    edited = _compiled.source_path("sluicegate.core.segmenter", package)
    edited.write_text(edited.read_text() + "# edited\n")
    assert "segmenter.py (sluicegate.core.segmenter) changed since it was compiled" in (
        _compiled.stale(package) or ""
    )


def test_a_source_edited_while_the_build_ran_makes_it_stale(tmp_path: Path) -> None:
    """setup.py records the sources as mypyc read them, not as they are when the build ends."""
    package = tmp_path / "sluicegate"
    _fake_build(package)
    read = _compiled.source_hashes(package)  # when mypyc read them
    edited = _compiled.source_path("sluicegate.core.frames", package)
    edited.write_text(edited.read_text() + "# edited while the C compiled\n")
    _compiled.write_manifest(package, record=read)
    assert "frames.py (sluicegate.core.frames) changed since it was compiled" in (
        _compiled.stale(package) or ""
    )


def test_a_missing_binary_or_record_makes_it_stale(tmp_path: Path) -> None:
    package = tmp_path / "sluicegate"
    _fake_build(package)
    binary = _compiled.binary_path("sluicegate.transport.sse", package)
    assert binary is not None
    binary.unlink()
    assert "sluicegate.transport.sse has no compiled binary" in (_compiled.stale(package) or "")
    _fake_build(package)
    (package / _compiled.MANIFEST).unlink()
    assert "no build record" in (_compiled.stale(package) or "")


PROBE = (
    "import importlib, json, sluicegate._compiled as c\n"
    "for name in c.COMPILED: importlib.import_module(name)\n"
    "print(json.dumps({'mode': c.mode, 'loaded': c.loaded()}))\n"
)


def test_a_stale_build_runs_pure_with_one_warning(tmp_path: Path) -> None:
    """A real build, copied, one of its sources edited: every hot module loads from its .py."""
    if not _built():
        pytest.skip("this checkout has no compiled build (python setup.py build_ext --inplace)")
    copy = tmp_path / "src"
    shutil.copytree(SRC / "sluicegate", copy / "sluicegate", ignore=shutil.ignore_patterns("__pycache__"))
    for group_library in SRC.glob("*__mypyc*"):  # mypyc's shared library of the group
        shutil.copy2(group_library, copy)
    fresh = _run(["-c", PROBE], pure=False, pythonpath=copy)
    assert fresh.returncode == 0, fresh.stderr.decode()
    assert json.loads(fresh.stdout)["loaded"] == dict.fromkeys(_compiled.COMPILED, True)
    assert b"RuntimeWarning" not in fresh.stderr

    edited = copy / "sluicegate" / "core" / "segmenter.py"
    edited.write_text(edited.read_text() + "\n# an edit the binary does not have\n")
    stale = _run(["-c", PROBE], pure=False, pythonpath=copy)
    assert stale.returncode == 0, stale.stderr.decode()
    report = json.loads(stale.stdout)
    assert report["loaded"] == dict.fromkeys(_compiled.COMPILED, False)
    assert report["mode"].startswith("pure (segmenter.py (sluicegate.core.segmenter) changed")
    assert stale.stderr.decode().count("RuntimeWarning") == 1

    switched = _run(["-c", PROBE], pure=True, pythonpath=copy)
    assert json.loads(switched.stdout)["loaded"] == dict.fromkeys(_compiled.COMPILED, False)
    assert b"RuntimeWarning" not in switched.stderr  # asked for: no warning


def test_a_binary_of_a_module_no_longer_compiled_is_found(tmp_path: Path) -> None:
    """A build from before a module left `COMPILED` leaves its binary beside its `.py`."""
    package = tmp_path / "sluicegate"
    _fake_build(package)
    assert _compiled.orphans(package) == {}  # the listed binaries are not orphans
    left = package / "parsing" / f"parser{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    left.write_bytes(b"")
    (package / "parsing" / "parser.py").write_text("# the source now\n")
    assert _compiled.orphans(package) == {"sluicegate.parsing.parser": left}
    assert _compiled.stale(package) is None  # the build itself is fine: only the orphan is wrong


ORPHAN_PROBE = (
    "import json, sluicegate._compiled as c, sluicegate.dialects.llamaserver.tokens as t\n"
    "print(json.dumps({'file': t.__file__, 'pure': sorted(c._pure)}))\n"
)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_a_left_behind_binary_warns_and_its_source_is_loaded(tmp_path: Path, pure: bool) -> None:
    """In a copy of the package, a (broken) binary for a module `COMPILED` does not list: the
    import warns naming it and loads the `.py` (unguarded, Python loads the binary and fails)."""
    copy = tmp_path / "src"
    shutil.copytree(
        SRC / "sluicegate", copy / "sluicegate", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    (copy / "sluicegate" / _compiled.MANIFEST).unlink(missing_ok=True)  # a pure tree: no build
    tokens = copy / "sluicegate" / "dialects" / "llamaserver" / "tokens.py"
    binary = tokens.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0])
    binary.write_bytes(b"not an extension module: an older build's, say")
    run = _run(["-c", ORPHAN_PROBE], pure=pure, pythonpath=copy)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    report = json.loads(run.stdout)
    assert report["file"] == str(tokens)
    assert "sluicegate.dialects.llamaserver.tokens" in report["pure"]
    stderr = run.stderr.decode()
    assert stderr.count("RuntimeWarning") == 1 and "sluicegate.dialects.llamaserver.tokens" in stderr
    assert str(binary) in stderr
