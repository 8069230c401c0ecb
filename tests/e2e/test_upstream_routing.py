"""Prefix-affinity routing end to end (issue 46, part 4): two Sluicegate servers sharing a Redis
store, in front of three fake upstream replicas. A conversation whose turns alternate between
the two servers (behind a load balancer) stays on one upstream replica; with Redis stopped, the
servers route on their own tables and every request is still served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from fake_upstream import FakeUpstream, running
from upstream_support import REPLICA_HEADER, upstream_model

from redis_support import RedisServer, redis_server

pytestmark = pytest.mark.e2e

SYSTEM = "You answer questions about the routing end-to-end test, briefly and kindly. " * 6


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FakeUpstream]]:
    with running("r1", "r2", "r3") as upstreams:
        yield upstreams


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def servers(start_server: StartServer, fakes: list[FakeUpstream], redis: RedisServer) -> list[Server]:
    model = upstream_model("chat", *fakes, scenario="fake-model", routing="prefix_affinity")
    store = {"store": {"backend": "redis", "url": redis.url}}
    return [start_server({}, [model], store) for _ in range(2)]


def turn(server: Server, messages: list[dict[str, str]]) -> str:
    """One turn through this server with the official client; the replica that served it."""
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30) as client:
        raw = client.chat.completions.with_raw_response.create(model="chat", messages=messages)  # type: ignore[arg-type]
        answer = raw.parse()
    messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
    return raw.headers[REPLICA_HEADER]


def conversation(servers: list[Server], name: str, turns: int) -> list[str]:
    messages = [{"role": "system", "content": f"{name}: {SYSTEM}"}]
    served = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"{name}, question {i}"})
        served.append(turn(servers[i % 2], messages))  # turns alternate between the servers
    return served


def test_a_conversation_across_two_sluicegates_stays_on_one_replica(servers: list[Server]) -> None:
    # Another user's short request on the second server first: its rotation of idle replicas
    # then differs from the first's, so only the shared table can keep a conversation together.
    turn(servers[1], [{"role": "user", "content": "hi"}])
    homes = []
    for i in range(4):
        served = conversation(servers, f"chat {i}", 4)
        assert len(set(served)) == 1, served
        homes.append(served[0])
    assert len(set(homes)) > 1  # different conversations do not all go to one replica


def test_without_redis_every_request_is_still_served(
    servers: list[Server], redis: RedisServer, tmp_path: Path
) -> None:
    redis.stop()
    try:
        for i in range(2):
            served = conversation([servers[0], servers[0]], f"no redis {i}", 3)
            assert len(set(served)) == 1, served  # one server's own table still routes it
    finally:
        redis.start()
