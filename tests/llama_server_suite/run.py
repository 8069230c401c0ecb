"""Run llama.cpp's own server test suite (tools/server/tests, from the llama-cpp-python sdist of
the installed version, unchanged) against Sluicegate, and report what passed and why the rest
failed.

    python tests/llama_server_suite/run.py --report            # the default (not slow) tests
    python tests/llama_server_suite/run.py --report -- unit/test_tokenize.py -k detokenize
    SUITE_TEXT_MODEL=gemma python tests/llama_server_suite/run.py --report

The tests are copied into a scratch folder; the suite starts "llama-server" through
LLAMA_SERVER_BIN_PATH, which is a wrapper around fake_llama_server.py (it turns the flags into
a Sluicegate config and becomes `sluicegate serve`). `shim/wget.py` stands in for the `wget`
package the suite downloads with, serving local files. The pass/fail of every test goes to a
JSON file (`--json`) that tests/e2e/test_llama_server_suite.py reads.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
import models  # noqa: E402

from llamacpp_sources import CACHE, SourcesUnavailable, llama_cpp_tree, sdist_files  # noqa: E402

_KEEP = re.compile(r"^[^/]+/vendor/llama\.cpp/tools/server/tests/.+$")
PER_TEST_TIMEOUT = 120  # seconds; a hung stream fails its test instead of stalling the run


@dataclass
class Outcome:
    file: str
    test: str
    outcome: str  # "passed", "failed", "error", "skipped"
    reason: str = ""


def suite_dir() -> Path:
    """The suite's tests folder, from the sdist (downloaded once into the test cache)."""
    version = importlib.metadata.version("llama-cpp-python")
    root = sdist_files("llama-cpp-python", _KEEP, CACHE / f"llama-cpp-python-{version}-server-tests")
    tests = root / "vendor" / "llama.cpp" / "tools" / "server" / "tests"
    if not (tests / "utils.py").is_file():
        raise SystemExit(f"{root} holds no tools/server/tests")
    return tests


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run(
    pytest_args: list[str], scratch: Path, *, text_model: str, timeout: int, slow: bool = False
) -> tuple[list[Outcome], float]:
    """Run the copied suite in a subprocess; every test's outcome, and the wall time."""
    # Laid out as in llama.cpp: the template tests name ../../../models/templates/*.jinja.
    tests = scratch / "llama.cpp" / "tools" / "server" / "tests"
    shutil.copytree(suite_dir(), tests)
    with contextlib.suppress(SourcesUnavailable):  # else those tests get the model's own template
        shutil.copytree(
            llama_cpp_tree() / "models" / "templates", scratch / "llama.cpp" / "models" / "templates"
        )
    paths = models.build(text_model)
    # test_security's `--media-path ../../../tools` reads `file://mtmd/test-1.jpeg`: a picture
    # where llama.cpp keeps its own (the stand-in's; the sdist copy holds only the tests).
    (scratch / "llama.cpp" / "tools" / "mtmd").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths["image"], scratch / "llama.cpp" / "tools" / "mtmd" / "test-1.jpeg")
    model_map = models.write_map(paths, scratch / "models.json")
    wrapper = scratch / "llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_llama_server.py"}" "$@"\n')
    wrapper.chmod(0o755)
    report = scratch / "junit.xml"
    path = os.pathsep.join([str(HERE / "shim"), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICEGATE_", "PYTEST_"))}
    env |= {
        "LLAMA_SERVER_BIN_PATH": str(wrapper),
        "PORT": str(_free_port()),
        "SUITE_MODELS": str(model_map),
        "SUITE_WORK": str(scratch / "launches"),
        "PYTHONPATH": path,
        "PYTHONUNBUFFERED": "1",
        "XDG_DATA_HOME": str(scratch / "xdg"),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "suite_offline",
        "-q",
        "--tb=line",
    ]
    # The timeout is the test's own (not its fixtures': the session's first one starts every
    # preset's server once, which the suite bounds itself, 60 s each).
    command += [f"--timeout={timeout}", "-o", "timeout_func_only=true"]
    command += [f"--junitxml={report}", "-o", "junit_family=xunit1"]
    command += [] if slow else ["-m", "not slow"]  # the suite's default selection (tests.sh)
    command += pytest_args or ["unit"]
    started = time.monotonic()
    with open(scratch / "pytest.log", "wb") as log:
        subprocess.run(command, cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - started
    if not report.is_file():
        raise SystemExit(f"pytest wrote no report; see {scratch / 'pytest.log'}")
    return outcomes(report), elapsed


def _reason(node: ET.Element) -> str:
    """One line saying why: the failure's message, numbers of addresses and ports removed."""
    lines = [line for line in (node.get("message") or node.text or "").splitlines() if line.strip()]
    line = lines[0].strip() if lines else node.tag
    line = re.sub(r"127\.0\.0\.1:\d+", "HOST", line)
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    return line[:160]


def outcomes(report: Path) -> list[Outcome]:
    found = []
    for case in ET.parse(report).iter("testcase"):
        classname = case.get("classname", "")
        file = classname.replace(".", "/") + ".py" if classname else case.get("file", "?")
        outcome, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed" if tag == "failure" else tag
                reason = _reason(node)
                break
        found.append(Outcome(file, case.get("name", "?"), outcome, reason))
    return found


def print_report(results: list[Outcome], elapsed: float) -> None:
    counts = Counter(r.outcome for r in results)
    print(f"\n{len(results)} tests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print(f"wall time: {elapsed:.0f} s\n")
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        by_file[r.file][r.outcome] += 1
    print(f"{'file':44} {'passed':>7} {'failed':>7} {'error':>6} {'skipped':>8}")
    for file in sorted(by_file):
        c = by_file[file]
        print(f"{file:44} {c['passed']:7} {c['failed']:7} {c['error']:6} {c['skipped']:8}")
    reasons: dict[str, list[Outcome]] = defaultdict(list)
    for r in results:
        if r.outcome in ("failed", "error"):
            reasons[r.reason].append(r)
    print("\nfailure reasons (most common first):")
    for reason, cases in sorted(reasons.items(), key=lambda item: -len(item[1])):
        print(f"\n{len(cases):4}  {reason}")
        for case in cases:
            print(f"        {case.file}::{case.test}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--report", action="store_true", help="print per-file counts and failure reasons")
    parser.add_argument("--json", type=Path, help="write every test's outcome here")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (logs, configs)")
    parser.add_argument("--timeout", type=int, default=PER_TEST_TIMEOUT, help="per-test timeout, seconds")
    parser.add_argument("--slow", action="store_true", help="the slow tests too (most need big Hub models)")
    parser.add_argument("--merge", type=Path, nargs="+", help="report these --json files together (no run)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (default: unit)")
    args = parser.parse_args()
    text_model = os.environ.get("SUITE_TEXT_MODEL", "demo")
    if args.merge:  # runs split by file (two at once get more of a busy machine)
        loaded = [json.loads(path.read_text(encoding="utf-8")) for path in args.merge]
        results = [Outcome(**r) for one in loaded for r in one["results"]]
        elapsed = max(one["elapsed"] for one in loaded)
    elif args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        results, elapsed = run(
            args.pytest_args, args.keep, text_model=text_model, timeout=args.timeout, slow=args.slow
        )
    else:
        with tempfile.TemporaryDirectory(prefix="llama-server-suite-") as scratch:
            results, elapsed = run(
                args.pytest_args, Path(scratch), text_model=text_model, timeout=args.timeout, slow=args.slow
            )
    if args.json:
        args.json.write_text(
            json.dumps({"elapsed": elapsed, "results": [asdict(r) for r in results]}, indent=1),
            encoding="utf-8",
        )
    if args.report:
        print_report(results, elapsed)
    else:
        passed = sum(r.outcome == "passed" for r in results)
        print(f"{passed} of {len(results)} passed in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
