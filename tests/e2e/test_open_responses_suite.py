"""The official Open Responses compliance suite (`../shared/conformance/open-responses/`, run
unchanged by its own `run` script) against a server with a scripted model.

Every test passes, the WebSocket transport's included (`ws://…/v1/responses`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from responses_support import REPO, Server, running_server

pytestmark = pytest.mark.e2e

MODEL = "scripted"
API_KEY = "sk-suite"
SUITE_CANDIDATES = [
    *([Path(os.environ["OPEN_RESPONSES_SUITE"])] if os.environ.get("OPEN_RESPONSES_SUITE") else []),
    REPO.parent / "shared" / "conformance" / "open-responses",
    REPO / "shared" / "conformance" / "open-responses",
]
SUITE = next((path for path in SUITE_CANDIDATES if (path / "run").is_file()), None)
SUITE_TIMEOUT = 600.0  # the first run installs Bun and zod from npm


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("suite"), server={"api_keys": [API_KEY]}, models={MODEL: "conformance.yaml"}
    ) as s:
        yield s


@pytest.mark.skipif(shutil.which("npm") is None, reason="node/npm are not installed (.ci/run installs them)")
@pytest.mark.skipif(SUITE is None, reason=f"the compliance suite is in none of {SUITE_CANDIDATES}")
def test_the_open_responses_compliance_suite_passes(server: Server) -> None:
    assert SUITE is not None
    done = subprocess.run(
        ["bash", str(SUITE / "run"), server.api_url, MODEL, API_KEY, "--json"],
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    start = done.stdout.find("{")
    assert start >= 0, done.stdout + done.stderr
    report = json.loads(done.stdout[start:])
    results = {r["id"]: r for r in report["results"]}
    assert len(results) == 17, sorted(results)
    failed = {i: r.get("errors") for i, r in results.items() if r["status"] != "passed"}
    assert not failed, failed
    assert sum(1 for i in results if i.startswith("websocket-")) == 7, sorted(results)
