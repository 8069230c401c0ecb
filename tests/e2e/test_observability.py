"""Metrics and logs as an operator meets them: /metrics in Prometheus format with histograms by
dialect/model/status, and `log_format = "json"`: every stderr line one JSON object, one access
line per request with its id, timings and tokens — and no prompt text unless asked for."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from e2e_support import THINK_CONTENT, Server, chat_body, poll, scripted
from fake_upstream import FakeUpstream
from prometheus_client.parser import text_string_to_metric_families
from upstream_support import dead_url, upstream_model

pytestmark = pytest.mark.e2e

KEY = "sk-observability"
AUTH = {"Authorization": f"Bearer {KEY}"}
SECRET = "zebra-marmalade"  # a word of the prompt that must not reach the logs
MODELS = [scripted("chat", "chat.yaml"), scripted("slow", "slow.yaml")]


@pytest.fixture(scope="module")
def server(start_server: Any) -> Server:
    server: Server = start_server({"api_key": KEY, "log_format": "json"}, MODELS)
    return server


def metrics(server: Server) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(server.base_url + "/metrics", headers=AUTH).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(server: Server, name: str, **labels: str) -> float:
    return metrics(server).get((name, frozenset(labels.items())), 0.0)


def log_lines(server: Server) -> list[dict[str, Any]]:
    lines = server.stderr_path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]  # every line must be JSON


def access_line(server: Server, request_id: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        lines = [e for e in log_lines(server) if e.get("request_id") == request_id]
        return lines[0] if lines else None

    line = poll(find, timeout=10)
    assert line is not None, f"no access line for {request_id}:\n{server.output()}"
    return line


def test_a_streamed_request_is_measured_and_logged_once(server: Server) -> None:
    labels = {"dialect": "chat_completions", "model": "chat"}
    before = sample(server, "sluicegate_request_duration_seconds_count", **labels, status="200")
    body = chat_body("chat", f"think about {SECRET}", stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", server.api_url + "/chat/completions", json=body, headers=AUTH) as response:
        assert response.status_code == 200
        text = response.read().decode()
        request_id = response.headers["x-request-id"]
    assert THINK_CONTENT.split()[0] in text

    line = access_line(server, request_id)
    assert line["logger"] == "sluicegate.access" and line["level"] == "info"
    assert (line["dialect"], line["model"], line["status"]) == ("chat_completions", "chat", 200)
    assert line["method"] == "POST" and line["path"] == "/v1/chat/completions"
    assert 0 < line["ttft_seconds"] <= line["total_seconds"]
    assert line["tokens_in"] > 0 and line["tokens_out"] > 0
    assert [e for e in log_lines(server) if e.get("request_id") == request_id] == [line]  # one line
    assert SECRET not in server.stderr_path.read_text()

    after = metrics(server)
    get = lambda name, **extra: after.get((name, frozenset({**labels, **extra}.items())), 0.0)  # noqa: E731
    assert get("sluicegate_request_duration_seconds_count", status="200") == before + 1
    assert get("sluicegate_time_to_first_token_seconds_count") >= 1
    assert get("sluicegate_inter_token_seconds_count") >= 1
    assert get("sluicegate_prompt_tokens_total") >= line["tokens_in"]
    assert get("sluicegate_completion_tokens_total") >= line["tokens_out"]
    assert after[("sluicegate_queue_depth", frozenset({"model": "chat"}.items()))] == 0
    assert after[("sluicegate_model_loaded", frozenset({"model": "chat"}.items()))] == 1
    assert after[("sluicegate_model_loads_total", frozenset({"model": "chat", "outcome": "ok"}.items()))] == 1
    assert after[("sluicegate_model_load_seconds_count", frozenset({"model": "chat"}.items()))] == 1
    # The series the other e2e tests read are still there.
    assert ("sluicegate_generations_active", frozenset({"model": "chat"}.items())) in after
    assert after[
        ("sluicegate_requests_total", frozenset({"dialect": "chat_completions", "status": "200"}.items()))
    ]


def test_errors_and_cancelled_streams_have_their_status(server: Server) -> None:
    missing = httpx.post(server.api_url + "/responses", json={"model": "nope", "input": "hi"}, headers=AUTH)
    assert missing.status_code == 404
    assert sample(
        server, "sluicegate_request_duration_seconds_count", dialect="responses", model="", status="404"
    )
    assert httpx.get(server.api_url + "/models").status_code == 401
    assert poll(lambda: [e for e in log_lines(server) if e.get("status") == 401], timeout=10)

    body = chat_body("slow", "go", stream=True)
    with httpx.stream("POST", server.api_url + "/chat/completions", json=body, headers=AUTH) as response:
        request_id = response.headers["x-request-id"]
        next(response.iter_lines())  # the first frame, then hang up
    line = access_line(server, request_id)
    assert line["status"] == 499 and line["model"] == "slow"
    assert sample(
        server,
        "sluicegate_request_duration_seconds_count",
        dialect="chat_completions",
        model="slow",
        status="499",
    )


def test_prompts_are_logged_only_when_asked(start_server: Any) -> None:
    server: Server = start_server({"log_format": "json", "log_prompts": True}, MODELS)
    response = httpx.post(server.api_url + "/chat/completions", json=chat_body("chat", f"say {SECRET}"))
    assert response.status_code == 200
    line = access_line(server, response.headers["x-request-id"])
    assert SECRET in line["request_body"]
    assert line["answer"] == response.json()["choices"][0]["message"]["content"]


def test_upstream_replica_health(start_server: Any) -> None:
    fake = FakeUpstream(name="alive").start()
    try:
        dead = dead_url()
        model = upstream_model("relayed", dead, fake, scenario="hello", health_check_interval=0)
        server: Server = start_server({"api_key": KEY}, [model])
        healthy = {"model": "relayed", "replica": fake.base_url}
        down = {"model": "relayed", "replica": dead}
        assert sample(server, "sluicegate_upstream_replica_healthy", **healthy) == 1
        assert sample(server, "sluicegate_upstream_replica_healthy", **down) == 1  # not tried yet
        for _ in range(2):  # the replicas are tried in turn: one of these goes to the dead one
            body = chat_body("relayed", "hi")
            assert (
                httpx.post(server.api_url + "/chat/completions", json=body, headers=AUTH).status_code == 200
            )
        assert sample(server, "sluicegate_upstream_replica_healthy", **down) == 0
        assert sample(server, "sluicegate_upstream_replica_healthy", **healthy) == 1
        assert sample(server, "sluicegate_upstream_replica_outstanding", **healthy) == 0
    finally:
        fake.stop()
