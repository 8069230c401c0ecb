"""The gateway's fast lane (`TurnPipeline.carry`, turn/pipeline.py): upstream reads carried to
the client in the connection's callback, through the same stream core (turn/stream_core.py),
must write exactly what the stream's task writes.

Two servers relay the same paced upstream streams, one with the lane and one with
`SLUICEGATE_FAST_LANE=0`; every dialect's stream must be the same event for event (ids and
clocks aside), and the lane must have carried reads (its counter in /metrics) where the other
carried none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_support import Server
from fake_upstream import FakeUpstream, Scenario, chunk, text_stream, usage
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

WORDS = [f" w{i}" for i in range(12)]
TOOL = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Let me"}),
    chunk({"reasoning_content": " think."}),
    chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get", "arguments": ""}}
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
    chunk(finish_reason="tool_calls"),
    chunk(choices=False, usage=usage(10, 5)),
]
NUMBERED = 6000  # tokens of the slow reader's stream: ~1.5 MB of frames, many times the socket's buffers
SCENARIOS = {
    "numbered": Scenario(frames=list(text_stream([f" t{i}" for i in range(NUMBERED)]))),
    "paced": Scenario(frames=list(text_stream(WORDS)), frame_delay=0.01),
    "split": Scenario(frames=list(text_stream(WORDS)), frame_delay=0.01, split=True),
    "tool": Scenario(frames=TOOL, frame_delay=0.01),
}
# Fields that differ between two servers (ids, clocks) and so between any two runs.
VARYING = {
    "id",
    "response_id",
    "created_at",
    "total_duration",  # Ollama's timings
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
    "stats",  # LM Studio's timings
    "created",
    "completed_at",
    "item_id",
    "call_id",
    "system_fingerprint",
    "signature",  # a thinking block's, keyed by each server's own secret
}
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "anthropic": (
        "/v1/messages",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True},
    ),
    "responses": ("/v1/responses", {"input": "hi", "stream": True, "store": False}),
    "responses-stored": ("/v1/responses", {"input": "hi", "stream": True}),
    "lmstudio": ("/api/v1/chat", {"input": "hi", "stream": True, "store": False}),
    "ollama": ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="lane") as fake:
        fake.scenarios.update(SCENARIOS)
        yield fake


@pytest.fixture(scope="module")
def servers(start_server: Any, upstream: FakeUpstream) -> tuple[Server, Server]:
    models = [upstream_model(name, upstream) for name in SCENARIOS]
    lane: Server = start_server(models=models)
    chain: Server = start_server(models=models, env={"SLUICEGATE_FAST_LANE": "0"})
    return lane, chain


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "*" if k in VARYING else _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _events(server: Server, path: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The stream as (event name, data with ids and clocks scrubbed), in order."""
    events: list[tuple[str | None, Any]] = []
    name: str | None = None
    with httpx.stream("POST", server.base_url + path, json=body, timeout=30) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("{"):  # NDJSON (Ollama)
                events.append((None, _scrub(json.loads(line))))
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
                events.append((name, data if data == "[DONE]" else _scrub(json.loads(data))))
                name = None
    return events


def _lane_reads(server: Server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sluicegate_fast_lane_reads_total")
    )


@pytest.mark.parametrize("dialect", list(REQUESTS))
@pytest.mark.parametrize("scenario", ["paced", "split", "tool"])
def test_the_lane_writes_what_the_chain_writes(
    servers: tuple[Server, Server], dialect: str, scenario: str
) -> None:
    lane, chain = servers
    path, body = REQUESTS[dialect]
    before = _lane_reads(lane)
    with_lane = _events(lane, path, {**body, "model": scenario})
    assert _lane_reads(lane) > before  # the lane carried reads of this stream
    without = _events(chain, path, {**body, "model": scenario})
    assert with_lane == without
    assert len(with_lane) > (len(WORDS) // 2 if scenario != "tool" else 2)


def test_without_the_lane_nothing_is_carried(servers: tuple[Server, Server]) -> None:
    _, chain = servers
    _events(chain, "/v1/chat/completions", {**REQUESTS["chat"][1], "model": "paced"})
    assert _lane_reads(chain) == 0


def test_a_slow_reader_gets_every_token_in_order(servers: tuple[Server, Server]) -> None:
    """A client reading slower than the upstream writes: the socket's buffer fills and drains
    over and over, so reads go by the lane while it may write and by the generators while the
    client is behind (the lane's forced write, the chain's wait for the drain): every token
    arrives once, in order, and the stream ends properly."""
    lane, _ = servers
    before = _lane_reads(lane)
    body = {**REQUESTS["chat"][1], "model": "numbered"}
    raw = b""
    with httpx.stream("POST", lane.base_url + "/v1/chat/completions", json=body, timeout=60) as response:
        for piece in response.iter_raw(4096):
            raw += piece
            time.sleep(0.002)  # a slow reader, not a stopped one
    texts = [
        choice["delta"].get("content")
        for line in raw.decode().split("\n")
        if line.startswith("data: {")
        for choice in json.loads(line[6:])["choices"]
    ]
    assert "".join(t for t in texts if t) == "".join(f" t{i}" for i in range(NUMBERED))
    assert raw.rstrip().endswith(b"data: [DONE]")
    assert _lane_reads(lane) > before
