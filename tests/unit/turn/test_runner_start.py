"""A chat turn's start reads the ASGI scope itself: no Starlette `Request` made for it (its
properties are Python calls, once a request each) and no Python `asyncio.current_task` call
(`core/tasks.py`): bench/README.md, gateway "Round fifteen"."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import HTTPConnection
from starlette.testclient import TestClient

from scripted_app import scripted_client
from sluicegate.dialects.base import Turn
from sluicegate.turn.runner import Prepared, TurnEndpoint


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with scripted_client(tmp_path) as test_client:
        yield test_client


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_start_makes_no_request_object(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    made: list[str] = []
    init = HTTPConnection.__init__

    def counted(self: HTTPConnection, *args: Any, **kwargs: Any) -> None:
        made.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(HTTPConnection, "__init__", counted)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and "ok" in response.text
    assert made == []
    assert client.get("/v1/models").status_code == 200  # a route that does make one: the patch works
    assert made != []


def test_a_chat_start_makes_no_python_current_task_call(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    current = asyncio.current_task

    def counted(loop: Any = None) -> Any:
        calls.append(loop)
        return current(loop)

    monkeypatch.setattr(asyncio, "current_task", counted)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and "ok" in response.text
    assert calls == []


def test_a_plain_stream_does_not_keep_its_parsed_turn(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory per held stream (bench/README.md, gateway "Round fifteen"): once a plain stream is
    handed to its transport, the runner's frames keep neither `Prepared` nor the parsed `Turn`."""
    alive: list[int] = []
    stream = TurnEndpoint._stream

    def checked(self: TurnEndpoint, *args: Any, **kwargs: Any) -> Any:
        inner = stream(self, *args, **kwargs)

        async def run() -> Any:  # awaited where the runner awaits the stream
            gc.collect()
            alive.append(sum(isinstance(o, (Prepared, Turn)) for o in gc.get_objects()))
            return await inner

        return run()

    monkeypatch.setattr(TurnEndpoint, "_stream", checked)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and "ok" in response.text
    assert alive == [0]


@pytest.mark.parametrize("store", [False, True])
def test_a_plain_stream_runs_in_the_endpoint_itself(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, store: bool
) -> None:
    """bench/README.md, gateway "Round sixteen": a plain stream is not run in a `_run`
    coroutine of its own, which each of its steps would resume through; a stored one is (it
    is made live around the stream)."""
    runs: list[object] = []
    run = TurnEndpoint._run

    def counted(self: TurnEndpoint, *args: Any) -> Any:
        runs.append(args)
        return run(self, *args)

    monkeypatch.setattr(TurnEndpoint, "_run", counted)
    body = {"model": "m", "input": "hi", "stream": True, "store": store}
    response = client.post("/v1/responses", json=body)
    assert response.status_code == 200 and "response.completed" in response.text
    assert len(runs) == (1 if store else 0)


def test_the_runner_start_makes_no_closure_cells() -> None:
    """The endpoint and `prepare` make no closure per request (a lambda over a local makes
    that local a cell in the whole frame, and a cell object per call): what varies per request
    is bound with `functools.partial` instead."""
    assert TurnEndpoint.__call__.__code__.co_cellvars == ()
    assert TurnEndpoint.prepare.__code__.co_cellvars == ()
