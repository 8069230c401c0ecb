"""`.ci/run` checks the free disk before anything else: a CI run on a full disk died inside pip
("No space left on device") minutes in. The script is run from a copy in a temporary folder
(it works where it lies), with a Python that fails at once, so a check that let it through stops
at the next step instead of installing anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "run"


def run_ci(tmp_path: Path, min_free_gib: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(SCRIPT, tmp_path / ".ci" / "run")
    env = {**os.environ, "CI_MIN_FREE_GIB": min_free_gib, "PYTHON": "false"}
    return subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60
    )


def test_too_little_free_disk_fails_first_and_says_so(tmp_path: Path) -> None:
    done = run_ci(tmp_path, "1000000000")  # a billion GiB: never free
    assert done.returncode == 1
    assert "not enough free disk" in done.stderr and "at least 1000000000 GiB" in done.stderr
    assert "Filesystem" in done.stdout  # `df -h .` printed first
    assert "Python >= 3.11" not in done.stderr  # stopped before the next step
    assert not (tmp_path / ".venv").exists()


def test_enough_free_disk_goes_on_to_the_next_step(tmp_path: Path) -> None:
    done = run_ci(tmp_path, "0")
    assert "Filesystem" in done.stdout and "free here:" in done.stdout
    assert "not enough free disk" not in done.stderr
    assert "Python >= 3.11 is required" in done.stderr  # the next step ran (and refused `false`)
    assert done.returncode == 1


def test_a_limit_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    done = run_ci(tmp_path, "six")
    assert done.returncode == 1 and "whole number" in done.stderr
