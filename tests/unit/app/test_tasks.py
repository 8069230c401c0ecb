"""Embeddings and reranks as tasks of their own (`Engine.embed`, `Engine.rerank`), on scripted
models: every route's limits in its own dialect's shape, and the request deadline cancelling a
slow job and giving its slot back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sluicegate.app.factory import create_app
from sluicegate.config import load_settings

CONFIG = """[server]
data_dir = "data"
request_timeout_seconds = {timeout}

[[models]]
id = "embedder"
engine = "scripted"
script = "slow.yaml"
tasks = ["embeddings"]

[[models]]
id = "ranker"
engine = "scripted"
script = "slow.yaml"
tasks = ["rerank"]

[[models]]
id = "chat"
engine = "scripted"
script = "slow.yaml"
"""


def app_client(tmp_path: Path, timeout: float) -> TestClient:
    (tmp_path / "slow.yaml").write_text('token_delay_ms: 50\nreplies:\n  - content: "ok"\n')
    config = tmp_path / "sluicegate.toml"
    config.write_text(CONFIG.format(timeout=timeout))
    return TestClient(create_app(load_settings(config, env={})))


def sample(client: TestClient, name: str, model: str) -> float:
    found = re.search(rf'^{name}{{model="{model}"}} (\S+)$', client.get("/metrics").text, re.MULTILINE)
    return float(found[1]) if found else 0.0


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path, 600) as test_client:
        yield test_client


def test_every_embeddings_route_gives_the_same_vectors(client: TestClient) -> None:
    openai = client.post("/v1/embeddings", json={"model": "embedder", "input": ["a cat", "a dog"]}).json()
    ollama = client.post("/api/embed", json={"model": "embedder", "input": ["a cat", "a dog"]}).json()
    assert [d["embedding"] for d in openai["data"]] == ollama["embeddings"]
    assert len(ollama["embeddings"][0]) == 16 and ollama["prompt_eval_count"] == 4
    one = client.post("/api/embeddings", json={"model": "embedder", "prompt": "a cat"}).json()
    assert one["embedding"] == ollama["embeddings"][0]


@pytest.mark.parametrize(
    "inputs", ["", [""], ["a", ""], ["a"] * 2049], ids=["empty", "in-list", "one", "2049"]
)
def test_every_embeddings_route_has_the_same_limits(client: TestClient, inputs: object) -> None:
    openai = client.post("/v1/embeddings", json={"model": "embedder", "input": inputs})
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "input"
    ollama = client.post("/api/embed", json={"model": "embedder", "input": inputs})
    assert ollama.status_code == 400 and set(ollama.json()) == {"error"}


def test_a_model_serves_the_tasks_it_declares(client: TestClient) -> None:
    ranked = client.post(
        "/v1/rerank", json={"model": "ranker", "query": "sunny Paris", "documents": ["a fox", "Paris"]}
    )
    assert [r["index"] for r in ranked.json()["results"]] == [1, 0]
    for path, body in (
        ("/v1/embeddings", {"model": "ranker", "input": "x"}),
        ("/v1/rerank", {"model": "embedder", "query": "q", "documents": ["d"]}),
        ("/v1/chat/completions", {"model": "embedder", "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/embeddings", {"model": "chat", "input": "x"}),
    ):
        refused = client.post(path, json=body)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "model_not_supported", path


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": "embedder", "input": ["x"] * 2000}),
        ("/api/embed", {"model": "embedder", "input": ["x"] * 2000}),
        ("/v1/rerank", {"model": "ranker", "query": "q", "documents": ["d"] * 1000}),
    ],
    ids=["openai", "ollama", "rerank"],
)
def test_the_request_deadline_cancels_a_slow_job(tmp_path: Path, path: str, body: dict[str, object]) -> None:
    """100 s of work (50 ms an input) under a 1 s deadline: a 504 in the route's shape, and the
    slot free at once for the next request."""
    model = str(body["model"])
    with app_client(tmp_path, 1) as client:
        cancelled = sample(client, "sluicegate_generations_cancelled_total", model)
        late = client.post(path, json=body)
        assert late.status_code == 504 and "request_timeout_seconds" in late.text
        assert sample(client, "sluicegate_generations_active", model) == 0
        assert sample(client, "sluicegate_generations_cancelled_total", model) == cancelled + 1
        small = {**body, "input": ["x"]} if "input" in body else {**body, "documents": ["d"]}
        assert client.post(path, json=small).status_code == 200
