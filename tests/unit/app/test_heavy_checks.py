"""A heavy request check (llama.cpp tokenizing a 15 MB prompt, preprocessing 16 large images)
runs in a worker thread: every other client, /health included, is served meanwhile. It once
ran on the event loop and stalled the whole server for its duration."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from scripted_app import scripted_client
from sluicegate.core.request import ChatRequest
from sluicegate.engines.scripted import ScriptedEngine

BOUND = 30.0  # seconds: only a failing run waits this long (the check is released then)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with scripted_client(tmp_path) as test_client:
        yield test_client


def test_health_is_answered_while_a_heavy_check_runs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    check = ScriptedEngine.check

    def heavy(self: ScriptedEngine, request: ChatRequest) -> None:
        started.set()
        release.wait(BOUND)  # the check's work, until the test has seen /health answered
        finished.set()
        check(self, request)

    monkeypatch.setattr(ScriptedEngine, "heavy_checks", True)
    monkeypatch.setattr(ScriptedEngine, "check", heavy)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with ThreadPoolExecutor(1) as pool:
        chat = pool.submit(client.post, "/v1/chat/completions", json=body)
        assert started.wait(BOUND)
        health = client.get("/health")  # on a stalled loop, this waits for the check's end
        answered_during_check = not finished.is_set()
        release.set()
        assert health.status_code == 200
        assert chat.result(BOUND).json()["choices"][0]["message"]["content"] == "ok"
    assert answered_during_check, "/health waited for the check: it ran on the event loop"


def test_a_burst_of_heavy_checks_runs_a_few_at_a_time(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most `MAX_CHECKS` at once: the rest wait their turn (bounded memory)."""
    from sluicegate.core.checks import MAX_CHECKS

    lock, running, most = threading.Lock(), [0], [0]
    gate = threading.Event()
    check = ScriptedEngine.check

    def heavy(self: ScriptedEngine, request: ChatRequest) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == MAX_CHECKS:
                gate.set()
        gate.wait(BOUND)
        with lock:
            running[0] -= 1
        check(self, request)

    monkeypatch.setattr(ScriptedEngine, "heavy_checks", True)
    monkeypatch.setattr(ScriptedEngine, "check", heavy)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with ThreadPoolExecutor(MAX_CHECKS + 3) as pool:
        replies = list(
            pool.map(lambda _: client.post("/v1/chat/completions", json=body), range(MAX_CHECKS + 3))
        )
    assert all(r.status_code == 200 for r in replies)
    assert most[0] == MAX_CHECKS
