"""Two `sluicegate serve` processes sharing one real Redis (`[store] backend = "redis"`).

A conversation started on A continues on B; a background run started on A is streamed
(`starting_after`) and cancelled from B while it runs, and read and streamed again from B once
finished; A killed with SIGKILL mid-run is reported `failed` (`owner_lost`) by B once A's lease
expires; Redis going away is a 503 (never a 500) that heals when Redis is back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from e2e_support import Server, parse_sse, run_server, scripted, write_config

from redis_support import RedisServer, redis_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@contextlib.contextmanager
def replica(folder: Path, redis: RedisServer) -> Iterator[Server]:
    config = write_config(
        folder,
        {"data_dir": str(folder / "data")},
        [scripted("chat", "chat.yaml"), scripted("slow", "responses_slow.yaml")],
        {"store": {"backend": "redis", "url": redis.url}},
    )
    with run_server(folder, config) as server:
        yield server


@pytest.fixture(scope="module")
def replicas(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    with replica(tmp_path_factory.mktemp("a"), redis) as a, replica(tmp_path_factory.mktemp("b"), redis) as b:
        yield a, b


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0)


def test_a_conversation_started_on_one_replica_continues_on_the_other(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    with sdk(a) as on_a, sdk(b) as on_b:
        first = on_a.responses.create(model="chat", input="My name is Ada.")
        assert on_b.responses.retrieve(first.id).model_dump() == first.model_dump()
        second = on_b.responses.create(model="chat", input="What is my name?", previous_response_id=first.id)
        assert second.previous_response_id == first.id and second.status == "completed"
        items = on_a.responses.input_items.list(second.id)
        assert [i.type for i in items.data] == ["message"]
        on_a.responses.delete(second.id)
        with pytest.raises(openai.NotFoundError):
            on_b.responses.retrieve(second.id)


def test_a_finished_background_response_is_streamed_again_from_the_other_replica(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    with sdk(a) as on_a:
        started = on_a.responses.create(model="chat", input="hi", background=True)
        while (done := on_a.responses.retrieve(started.id)).status in ("queued", "in_progress"):
            time.sleep(0.05)
    assert done.status == "completed"
    with httpx.stream(
        "GET", f"{b.api_url}/responses/{started.id}", params={"stream": "true", "starting_after": 2}
    ) as r:
        assert r.status_code == 200
        frames = parse_sse(r.read().decode())
    events = [f.json() for f in frames if f.data is not None and not f.is_done]
    assert events[0]["sequence_number"] == 3
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["id"] == started.id
    assert frames[-1].data == "[DONE]"


def test_redis_down_is_a_503_and_service_resumes_when_it_returns(tmp_path: Path) -> None:
    with (
        redis_server(tmp_path / "redis") as redis,
        replica(tmp_path / "a", redis) as server,
        sdk(server) as client,
    ):
        stored = client.responses.create(model="chat", input="hi")
        redis.stop()
        for call in (
            lambda: client.responses.retrieve(stored.id),
            lambda: client.responses.create(model="chat", input="x", previous_response_id=stored.id),
            lambda: client.responses.create(model="chat", input="x", background=True),
            lambda: client.responses.input_items.list(stored.id),
            lambda: client.responses.delete(stored.id),
        ):
            with pytest.raises(openai.APIStatusError) as raised:
                call()
            assert raised.value.status_code == 503
        redis.start()  # same port, empty: the test's Redis keeps nothing on disk
        again = client.responses.create(model="chat", input="hi again")
        assert client.responses.retrieve(again.id).status == "completed"


def test_a_background_run_started_on_one_replica_is_streamed_and_cancelled_from_the_other(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    with sdk(a) as on_a, sdk(b) as on_b:
        run = on_a.responses.create(model="slow", input="crawl", background=True)  # 300 slow words
        events = []
        with on_b.responses.retrieve(run.id, stream=True, starting_after=2) as stream:
            for event in stream:
                events.append(event)
                deltas = [e for e in events if e.type == "response.output_text.delta"]
                if len(deltas) == 3:  # the run is live on A: cancel it from B, mid-stream
                    cancelled = on_b.responses.cancel(run.id)
                    assert cancelled.status == "cancelled"
        assert events[0].sequence_number == 3
        assert [e.sequence_number for e in events] == list(range(3, 3 + len(events)))
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.status == "cancelled"  # type: ignore[union-attr]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert 3 <= len(text.split()) < 300  # cut short by the cancel
        assert on_a.responses.retrieve(run.id).status == "cancelled"


def test_a_replica_killed_mid_run_is_reported_failed_by_the_other_after_its_lease(
    redis: RedisServer, replicas: tuple[Server, Server], tmp_path: Path
) -> None:
    _, b = replicas
    with replica(tmp_path / "doomed", redis) as doomed, sdk(doomed) as on_doomed, sdk(b) as on_b:
        run = on_doomed.responses.create(model="slow", input="crawl", background=True)
        with on_b.responses.retrieve(run.id, stream=True) as stream:
            for event in stream:  # running on the doomed replica, followed from B
                if event.type == "response.output_text.delta":
                    break
        doomed.process.kill()  # SIGKILL: no shutdown, its lease simply stops being renewed
        assert doomed.process.wait() == -9
        with on_b.responses.retrieve(run.id, stream=True, starting_after=0) as stream:
            events = list(stream)  # ends once B's sweep failed the run
    assert events[-1].type == "response.failed"
    failed = on_b_retrieve(b, run.id)
    assert failed["status"] == "failed" and failed["error"]["code"] == "owner_lost"
    assert events[-1].response.error.code == "owner_lost"  # type: ignore[union-attr]


def on_b_retrieve(server: Server, response_id: str) -> dict[str, object]:
    r = httpx.get(f"{server.api_url}/responses/{response_id}", timeout=30)
    assert r.status_code == 200
    body: dict[str, object] = r.json()
    return body
