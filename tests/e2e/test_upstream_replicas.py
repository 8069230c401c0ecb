"""Gateway mode with replicas: failover before the first byte (never after), the response
header naming the replica that served, health checks taking a replica out and putting it back,
and least-outstanding-requests routing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, poll
from fake_upstream import FakeUpstream, Scenario, chunk
from upstream_support import REPLICA_HEADER, dead_url, upstream_model

pytestmark = pytest.mark.e2e

CHECK_EVERY = 0.2  # health_check_interval of the health-checked model
DEAD = dead_url()


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    names = ("alpha", "beta", "gamma", "delta")
    upstreams = {name: FakeUpstream(name=name).start() for name in names}
    for fake in upstreams.values():
        fake.scenarios["dies-mid"] = Scenario(frames=[chunk({"content": "started"})], done=False, abrupt=True)
        fake.scenarios["hold"] = Scenario(frames=[chunk({"content": "held"}), None])
    upstreams["alpha"].scenarios["busy"] = Scenario(status=503, body=b'{"error":{"message":"no free slots"}}')
    try:
        yield upstreams
    finally:
        for fake in upstreams.values():
            fake.stop()


@pytest.fixture(scope="module")
def server(start_server: StartServer, fakes: dict[str, FakeUpstream]) -> Server:
    alpha, beta, gamma, delta = fakes.values()
    quiet = {"health_check_interval": 0}
    models = [
        # No active checks: the dead replica is found by trying it (then rests RETRY_AFTER).
        upstream_model("failover", DEAD, alpha, scenario="hello", **quiet),
        upstream_model("busy", alpha, beta, **quiet),
        upstream_model("dies-mid", alpha, beta, **quiet),
        upstream_model("lor", alpha, beta, scenario="hello", idle_timeout=0, **quiet),
        upstream_model("checked", gamma, delta, scenario="hello", health_check_interval=CHECK_EVERY),
    ]
    return start_server({"heartbeat_seconds": 5}, models)


def chat(server: Server, model: str, content: str = "Hi", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return httpx.post(server.api_url + "/chat/completions", json=body, timeout=30)


def served_by(server: Server, model: str, times: int) -> list[str]:
    replicas = []
    for _ in range(times):
        response = chat(server, model)
        assert response.status_code == 200, response.text
        replicas.append(response.headers[REPLICA_HEADER])
    return replicas


def test_a_dead_replica_fails_over_and_the_header_names_the_server(
    server: Server, fakes: dict[str, FakeUpstream]
) -> None:
    alpha = fakes["alpha"]
    assert served_by(server, "failover", 4) == [alpha.base_url] * 4
    # Routing alternates between idle replicas, so one of those requests went to the dead one.
    assert f"upstream replica {DEAD} is down" in server.output()
    with openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="failover", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        assert raw.headers[REPLICA_HEADER] == alpha.base_url
        assert (
            "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices) == "Hello from alpha"
        )
        with client.responses.with_streaming_response.create(
            model="failover", input="Hi", stream=True
        ) as response:
            assert response.headers[REPLICA_HEADER] == alpha.base_url


def test_a_5xx_before_the_first_byte_is_retried_on_another_replica(
    server: Server, fakes: dict[str, FakeUpstream]
) -> None:
    alpha, beta = fakes["alpha"], fakes["beta"]
    before = len(alpha.chat_requests("busy"))
    assert served_by(server, "busy", 4) == [beta.base_url] * 4
    refusals = alpha.chat_requests("busy")[before:]
    assert refusals and all(r.answered_status == 503 for r in refusals)  # it was asked, and said no


def requests_finished(server: Server, model: str) -> float:
    """Requests for `model` the server has finished, whatever their status (GET /metrics)."""
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    pattern = rf'^sluicegate_request_duration_seconds_count{{[^}}]*model="{re.escape(model)}"[^}}]*}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def test_no_retry_once_bytes_reached_the_client(server: Server, fakes: dict[str, FakeUpstream]) -> None:
    alpha, beta = fakes["alpha"], fakes["beta"]
    before = len(alpha.chat_requests("dies-mid")) + len(beta.chat_requests("dies-mid"))
    finished = requests_finished(server, "dies-mid")
    with openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0) as client:
        text = ""
        with pytest.raises(openai.APIError, match="connection broke"):
            for part in client.chat.completions.create(
                model="dies-mid", messages=[{"role": "user", "content": "Hi"}], stream=True
            ):
                text += (part.choices[0].delta.content or "") if part.choices else ""
    assert text == "started"
    # The server has finished the request (it is counted once its handler returned): a retry,
    # if there were one, has been sent by now.
    poll(lambda: requests_finished(server, "dies-mid") == finished + 1, timeout=30, fail=True)
    assert len(alpha.chat_requests("dies-mid")) + len(beta.chat_requests("dies-mid")) == before + 1


def test_least_outstanding_requests_routing(server: Server, fakes: dict[str, FakeUpstream]) -> None:
    body = {"model": "lor", "stream": True, "messages": [{"role": "user", "content": "@hold"}]}
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", server.api_url + "/chat/completions", json=body) as held,
    ):
        busy = held.headers[REPLICA_HEADER]
        other = next(f.base_url for f in (fakes["alpha"], fakes["beta"]) if f.base_url != busy)
        assert served_by(server, "lor", 3) == [other] * 3


def test_health_checks_take_a_replica_out_and_put_it_back(
    server: Server, fakes: dict[str, FakeUpstream]
) -> None:
    gamma, delta = fakes["gamma"], fakes["delta"]
    assert set(served_by(server, "checked", 6)) == {gamma.base_url, delta.base_url}
    delta.healthy = False
    # Out after two failed checks; from then on only gamma serves.
    poll(
        lambda: set(served_by(server, "checked", 4)) == {gamma.base_url},
        timeout=10,
        interval=CHECK_EVERY,
        fail=True,
    )
    assert set(served_by(server, "checked", 6)) == {gamma.base_url}
    delta.healthy = True
    poll(
        lambda: delta.base_url in served_by(server, "checked", 4), timeout=10, interval=CHECK_EVERY, fail=True
    )
