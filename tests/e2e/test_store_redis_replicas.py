"""Two `sluicegate serve` processes sharing one real Redis (`[store] backend = "redis"`).

What works through today's routes: a conversation started on A continues on B, a finished
background response is read and streamed again from B, and Redis going away is a 503 (never a
500) that heals when Redis is back.
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
        [scripted("chat", "chat.yaml")],
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
        ):
            with pytest.raises(openai.APIStatusError) as raised:
                call()
            assert raised.value.status_code == 503
        redis.start()  # same port, empty: the test's Redis keeps nothing on disk
        again = client.responses.create(model="chat", input="hi again")
        assert client.responses.retrieve(again.id).status == "completed"
