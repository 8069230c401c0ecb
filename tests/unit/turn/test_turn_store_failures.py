"""Turns whose record cannot be stored: never claimed `completed`, never left in flight.

A foreground turn ends failed instead of completed (`TurnPipeline._end`). A background run is
failed in the store at once (`BackgroundRun._abandon`): it once stayed in flight until the
process restarted, `GET` showed it `in_progress` for good and every follower of its stored log
waited forever (heartbeats kept their reads alive). The app runs in this process, so the test
can make the store refuse the record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from sluicegate.app.factory import create_app
from sluicegate.config import load_settings
from sluicegate.store.base import StoredResponse, StoreUnavailable


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "reply.yaml").write_text('replies:\n  - token_delay_ms: 20\n    content: "a b c d"\n')
    config = tmp_path / "sluicegate.toml"
    config.write_text(
        '[server]\ndata_dir = "data"\n\n[[models]]\nid = "m"\nengine = "scripted"\nscript = "reply.yaml"\n'
    )
    with TestClient(create_app(load_settings(config, env={}))) as test_client:
        yield test_client


def _settled(client: TestClient, response_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60  # bounds a hang only
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/v1/responses/{response_id}").json()
        if body["status"] not in ("queued", "in_progress"):
            return body
        time.sleep(0.02)
    raise AssertionError(f"{response_id} is still {body['status']}")


def _event_types(stream: str) -> list[str]:
    return [
        orjson.loads(line[len("data: ") :])["type"]
        for line in stream.splitlines()
        if line.startswith("data: {")
    ]


def test_a_run_whose_ending_cannot_be_stored_ends_failed(client: TestClient) -> None:
    store = client.app.state.sluicegate.store  # type: ignore[attr-defined]

    async def unavailable(record: StoredResponse, *, scope: str = "") -> None:
        raise StoreUnavailable("down")

    store.finish_run = unavailable
    created = client.post("/v1/responses", json={"model": "m", "input": "hi", "background": True}).json()
    failed = _settled(client, created["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "server_error"
    replay = client.get(f"/v1/responses/{created['id']}", params={"stream": "true"}).text
    types = _event_types(replay)
    assert types[:2] == ["response.created", "response.queued"] and types[-1] == "response.failed"
    assert replay.rstrip().endswith("data: [DONE]")


def test_a_run_that_ends_normally_is_not_touched(client: TestClient) -> None:
    created = client.post("/v1/responses", json={"model": "m", "input": "hi", "background": True}).json()
    done = _settled(client, created["id"])
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "a b c d"
    replay = client.get(f"/v1/responses/{created['id']}", params={"stream": "true"}).text
    assert _event_types(replay)[-1] == "response.completed"


def test_a_foreground_turn_that_cannot_be_stored_ends_failed_not_completed(client: TestClient) -> None:
    store = client.app.state.sluicegate.store  # type: ignore[attr-defined]

    async def unavailable(record: StoredResponse, *, scope: str = "") -> None:
        raise StoreUnavailable("down")

    store.put = unavailable
    stream = client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True}).text
    types = _event_types(stream)
    assert types[-1] == "response.failed" and "response.completed" not in types
    assert "The response store is unavailable" in stream
    answer = client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert answer.status_code == 503  # a client may retry it
    assert answer.json()["error"]["message"] == "The response store is unavailable; retry shortly."

    async def broken(record: StoredResponse, *, scope: str = "") -> None:
        raise ValueError("a bug")

    store.put = broken
    answer = client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert answer.status_code == 500 and "could not be stored" in answer.json()["error"]["message"]
