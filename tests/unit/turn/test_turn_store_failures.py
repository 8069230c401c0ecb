"""Turns whose record cannot be stored: never claimed `completed`, never left in flight.

A foreground turn ends failed instead of completed (`TurnPipeline._end`). A background run is
failed in the store at once (`BackgroundRun._abandon`): it once stayed in flight until the
process restarted, `GET` showed it `in_progress` for good and every follower of its stored log
waited forever (heartbeats kept their reads alive). The app runs in this process, so the test
can make the store refuse the record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from scripted_app import scripted_client
from sluicegate.store.base import StoredResponse, StoreUnavailable


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with scripted_client(tmp_path, 'token_delay_ms: 20\ncontent: "a b c d"') as test_client:
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


def _hold(store: Any, name: str) -> threading.Event:
    """Hold `store.<name>` until the returned event is set (from the test's thread)."""
    real = getattr(store, name)
    release = threading.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        await asyncio.to_thread(release.wait, 60)
        return await real(*args, **kwargs)

    setattr(store, name, held)
    return release


def _failed_code(client: TestClient, response_id: str) -> str | None:
    body = client.get(f"/v1/responses/{response_id}").json()
    return body["error"]["code"] if body["status"] == "failed" else None


def test_a_run_whose_ending_cannot_be_stored_ends_failed(client: TestClient) -> None:
    """One failure, one code: what the run shows while it is still live here and what the
    store records once it gives the run up are the same (they once differed, and which one a
    GET saw depended on timing)."""
    store = client.app.state.sluicegate.store  # type: ignore[attr-defined]

    async def unavailable(record: StoredResponse, *, scope: str = "") -> None:
        raise StoreUnavailable("down")

    store.finish_run = unavailable
    release = _hold(store, "abandon_run")  # the live run's failure shows before the store's
    created = client.post("/v1/responses", json={"model": "m", "input": "hi", "background": True}).json()
    deadline = time.monotonic() + 60  # bounds a hang only
    while (live_code := _failed_code(client, created["id"])) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    release.set()
    live = client.app.state.sluicegate.live  # type: ignore[attr-defined]
    while created["id"] in live:  # given up in the store: what a GET reads from now on
        assert time.monotonic() < deadline
        time.sleep(0.02)
    failed = _settled(client, created["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == live_code == "store_unavailable"
    replay = client.get(f"/v1/responses/{created['id']}", params={"stream": "true"}).text
    types = _event_types(replay)
    assert types[:2] == ["response.created", "response.queued"] and types[-1] == "response.failed"
    assert replay.rstrip().endswith("data: [DONE]")


def test_a_run_whose_state_cannot_be_written_ends_failed_once_the_store_can_say_so(
    client: TestClient,
) -> None:
    """A disk full mid-run: the log's writes fail, and so does giving the run up, a few times.
    The run's task ends without an exception nobody retrieves, a GET here never answers the
    run's stale `queued`/`in_progress`, and the store says `failed` once it can."""
    state = client.app.state.sluicegate  # type: ignore[attr-defined]
    store = state.store
    downs = {"abandon_run": 3}
    real_abandon = store.abandon_run

    async def unavailable(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("database or disk is full")

    async def abandon(*args: Any, **kwargs: Any) -> None:
        if downs["abandon_run"] > 0:
            downs["abandon_run"] -= 1
            raise StoreUnavailable("database or disk is full")
        await real_abandon(*args, **kwargs)

    release = _hold(store, "update_run")
    created = client.post("/v1/responses", json={"model": "m", "input": "hi", "background": True}).json()
    (run,) = [turn for turn in state.live.values() if turn.id == created["id"]]
    store.append_events = store.update_run = store.finish_run = unavailable
    store.abandon_run = abandon
    release.set()
    seen = set()
    deadline = time.monotonic() + 60  # bounds a hang only
    while downs["abandon_run"] > 0 or created["id"] in state.live:
        assert time.monotonic() < deadline
        seen.add(client.get(f"/v1/responses/{created['id']}").json()["status"])
        time.sleep(0.02)
    assert run.task is not None and run.task.done() and run.task.exception() is None
    failed = _settled(client, created["id"])
    assert failed["status"] == "failed" and failed["error"]["code"] == "store_unavailable"
    seen.add("failed")
    assert seen <= {"queued", "in_progress", "failed"}
    assert client.get(f"/v1/responses/{created['id']}").json()["status"] == "failed"


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
    assert answer.json()["error"]["code"] == "store_unavailable"  # as README documents

    async def broken(record: StoredResponse, *, scope: str = "") -> None:
        raise ValueError("a bug")

    store.put = broken
    answer = client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert answer.status_code == 500 and "could not be stored" in answer.json()["error"]["message"]


def _lmstudio_events(stream: str) -> list[tuple[str, dict[str, Any]]]:
    events, name = [], ""
    for line in stream.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: {"):
            events.append((name, orjson.loads(line[len("data: ") :])))
    return events


def test_an_lmstudio_chat_that_cannot_be_stored_announces_no_response_id(client: TestClient) -> None:
    """An id is only announced once it is durable: after the store failed, chat.end once still
    handed out a response_id that answered 404 for ever."""
    store = client.app.state.sluicegate.store  # type: ignore[attr-defined]

    async def unavailable(record: StoredResponse, *, scope: str = "") -> None:
        raise StoreUnavailable("database or disk is full")

    store.put = unavailable
    stream = client.post("/api/v1/chat", json={"model": "m", "input": "hi", "stream": True}).text
    events = _lmstudio_events(stream)
    names = [name for name, _ in events]
    assert "error" in names and names[-1] == "chat.end", names
    (error,) = [data for name, data in events if name == "error"]
    assert "store is unavailable" in error["error"]["message"]
    end = events[-1][1]["result"]
    assert "response_id" not in end or end["response_id"] is None, end
    answer = client.post("/api/v1/chat", json={"model": "m", "input": "hi"})
    assert answer.status_code == 503 and "response_id" not in answer.text


def _ended_here(state: Any, response_id: str) -> Any:
    """The live turn once its encoder has ended it (its record is being stored meanwhile)."""
    deadline = time.monotonic() + 60  # bounds a hang only
    while True:
        turn = state.live.get(response_id)
        if turn is not None and (turn.encoder.response_object() or {}).get("status") == "completed":
            return turn
        assert time.monotonic() < deadline, response_id
        time.sleep(0.01)


def test_a_get_never_says_completed_before_a_background_run_is_stored(client: TestClient) -> None:
    """The live snapshot once said `completed` while the record was still being written: a
    crash then lost what a client had been told (issue 47)."""
    state = client.app.state.sluicegate  # type: ignore[attr-defined]
    release = _hold(state.store, "finish_run")
    try:
        created = client.post("/v1/responses", json={"model": "m", "input": "hi", "background": True}).json()
        _ended_here(state, created["id"])
        shown = client.get(f"/v1/responses/{created['id']}").json()
        assert shown["status"] == "in_progress" and shown["completed_at"] is None and shown["usage"] is None
    finally:
        release.set()
    done = _settled(client, created["id"])
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "a b c d"


def test_a_get_never_says_completed_before_a_foreground_turn_is_stored(client: TestClient) -> None:
    state = client.app.state.sluicegate  # type: ignore[attr-defined]
    release = _hold(state.store, "put")
    streamed: list[str] = []
    body = {"model": "m", "input": "hi", "stream": True}
    streaming = threading.Thread(target=lambda: streamed.append(client.post("/v1/responses", json=body).text))
    streaming.start()
    try:
        deadline = time.monotonic() + 60  # bounds a hang only
        while not state.live:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (response_id,) = state.live
        _ended_here(state, response_id)
        assert client.get(f"/v1/responses/{response_id}").json()["status"] == "in_progress"
    finally:
        release.set()
        streaming.join(60)
    assert _event_types(streamed[0])[-1] == "response.completed"
    assert client.get(f"/v1/responses/{response_id}").json()["status"] == "completed"
