"""llama.cpp's own server test suite (tools/server/tests from the llama-cpp-python sdist,
unchanged) run against Sluicegate through the adapter in tests/llama_server_suite/: a fake
`llama-server` that turns its flags into a Sluicegate config, with local GGUFs for the models
the suite would download.

Every test of the suite starts its own server (about 5 s each here), so the whole default suite
(391 tests) takes ~40 minutes on 2 cores: it runs only with SLUICEGATE_LLAMA_SERVER_SUITE=1.
A small slice of it (the basic tests, ~2 minutes) always runs, so the adapter stays working.
The floors are what passes on main; raise them as llama-server's API lands (issue 44).
For every failing test and its reason: `python tests/llama_server_suite/run.py --report`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

RUNNER = Path(__file__).parents[1] / "llama_server_suite" / "run.py"
DEFAULT_TESTS = 391  # the suite's default selection (-m "not slow") in llama-cpp-python 0.3.36
# Measured on main at 816718a (2026-11-29): 241 passed, 144 failed, 6 skipped (e90cad4: 190;
# d0f813a: 130; before llama-server's API, at 9b57f1b: 33). The failures and their reasons:
# run.py --report, and tests/llama_server_suite/README.md. Raise this as more of issue 44 lands.
WHOLE_SUITE_FLOOR = 230
SLICE = ["unit/test_basic.py", "unit/test_compat_oai_responses.py"]
# Measured on main at 76e823d: test_basic.py 6 of 8 (a split GGUF from the Hub and llama-server's
# web UI at `/` fail), test_compat_oai_responses.py 1 of 3 (the stand-in model's empty output and
# the Responses stream's llama telemetry fail).
SLICE_FLOOR = 7
SLICE_PASSING = [  # kept passing, by name
    "test_server_start_simple",
    "test_server_models",
    "test_server_multiple_addresses",
    "test_server_props",
    "test_server_slots",
    "test_server_model_aliases_and_tags",
    "test_responses_stream_with_openai_library",
]


def _run(tmp_path: Path, pytest_args: list[str], timeout: float) -> dict[str, Any]:
    report = tmp_path / "outcomes.json"
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--json", str(report), "--keep", str(tmp_path / "run"), *pytest_args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if "SourcesUnavailable" in done.stderr and not os.environ.get("CI"):
        pytest.skip("the llama-cpp-python sdist could not be downloaded (no network)")
    assert done.returncode == 0 and report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return outcomes


def _passed(outcomes: dict[str, Any]) -> list[str]:
    return [r["test"] for r in outcomes["results"] if r["outcome"] == "passed"]


@pytest.mark.timeout(900)
def test_a_slice_of_the_suite_passes_through_the_adapter(tmp_path: Path) -> None:
    outcomes = _run(tmp_path, SLICE, timeout=800)
    passed = _passed(outcomes)
    assert len(outcomes["results"]) >= 10, outcomes  # the slice was collected and ran
    assert set(SLICE_PASSING) <= set(passed), outcomes
    assert len(passed) >= SLICE_FLOOR, outcomes


@pytest.mark.skipif(
    not os.environ.get("SLUICEGATE_LLAMA_SERVER_SUITE"),
    reason="the whole llama-server suite takes ~40 min: set SLUICEGATE_LLAMA_SERVER_SUITE=1",
)
@pytest.mark.timeout(4 * 3600)
def test_the_llama_server_suite_passes_at_least_the_floor(tmp_path: Path) -> None:
    outcomes = _run(tmp_path, [], timeout=4 * 3600 - 60)
    results = outcomes["results"]
    assert len(results) >= DEFAULT_TESTS * 3 // 4, len(results)  # collected (the count moves with the sdist)
    assert len(_passed(outcomes)) >= WHOLE_SUITE_FLOOR, sorted(_passed(outcomes))
