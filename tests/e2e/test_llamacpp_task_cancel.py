"""A rerank or an embedding is cancelled like a chat: by its client leaving or its request
deadline (`request_timeout_seconds`), logged 499 or 504, its slot free for the next request.

A /v1/rerank of many long documents once held the reranker's only slot for minutes after its
client left, and past the deadline, and both were logged 200."""

from __future__ import annotations

import re
import socket
from typing import Any
from urllib.parse import urlparse

import httpx
import orjson
import pytest
from conftest import StartServer
from e2e_support import Server, metric, poll

pytestmark = pytest.mark.e2e

ACTIVE = "sluicegate_generations_active"
CANCELLED = "sluicegate_generations_cancelled_total"
# Long documents, about a thousand tokens each: the whole job takes minutes on the demo model,
# one document a fraction of a second.
LONG = "The quick brown fox jumps over the lazy dog while the weather in Paris stays sunny. " * 20
MANY = 1000


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("tasks")
    return [
        {"id": "ranker", "engine": "llamacpp", "path": str(make_demo_gguf(folder / "r.gguf", rerank=True))},
        {
            "id": "embedder",
            "engine": "llamacpp",
            "path": str(make_demo_gguf(folder / "e.gguf", embedding=True)),
        },
    ]


def access_status(server: Server, path: str) -> list[int]:
    """The statuses of the access lines for `path`, in order."""
    return [int(s) for s in re.findall(rf'"POST {re.escape(path)}" (\d+)', server.output())]


def send_and_leave(server: Server, path: str, body: dict[str, Any], model: str) -> None:
    """Send the request, wait until its task holds the model's slot, then hang up."""
    address = urlparse(server.base_url)
    data = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection((address.hostname, address.port)) as sock:
        sock.sendall(head + data)
        poll(lambda: metric(server.base_url, ACTIVE, model) == 1, timeout=60, fail=True)


def small(path: str, model: str) -> dict[str, Any]:
    if path == "/v1/rerank":
        return {"model": model, "query": "weather", "documents": ["sunny Paris", "a fox"]}
    return {"model": model, "input": ["sunny Paris", "a fox"]}


def big(path: str, model: str) -> dict[str, Any]:
    if path == "/v1/rerank":
        return {"model": model, "query": "weather in Paris", "documents": [LONG] * MANY}
    return {"model": model, "input": [LONG] * MANY}


TASKS = [("/v1/rerank", "ranker"), ("/v1/embeddings", "embedder")]


@pytest.mark.parametrize(("path", "model"), TASKS, ids=["rerank", "embeddings"])
def test_a_client_that_leaves_cancels_the_task(
    start_server: StartServer, models: list[dict[str, Any]], path: str, model: str
) -> None:
    server = start_server(models=models)
    one = httpx.post(server.base_url + path, json={**big(path, model), **_one(path)}, timeout=120)
    assert one.status_code == 200, one.text  # a long document fits the model's context
    cancelled = metric(server.base_url, CANCELLED, model)
    send_and_leave(server, path, big(path, model), model)
    # The task stops: logged 499 (not 200 minutes later), its slot given back ...
    poll(lambda: 499 in access_status(server, path), timeout=60, fail=True)
    assert 200 not in access_status(server, path)[1:]
    assert metric(server.base_url, CANCELLED, model) == cancelled + 1
    # ... so the next request is served, while the abandoned job would still be running.
    second = httpx.post(server.base_url + path, json=small(path, model), timeout=120)
    assert second.status_code == 200, second.text
    # The access line is written as the request ends, which may be after its client has read it.
    poll(lambda: len(access_status(server, path)) == 3, timeout=30, fail=True)
    assert access_status(server, path)[-2:] == [499, 200]


@pytest.mark.parametrize(("path", "model"), TASKS, ids=["rerank", "embeddings"])
def test_the_request_deadline_cancels_the_task(
    start_server: StartServer, models: list[dict[str, Any]], path: str, model: str
) -> None:
    server = start_server({"request_timeout_seconds": 10}, models)
    late = httpx.post(server.base_url + path, json=big(path, model), timeout=120)
    assert late.status_code == 504, late.text
    assert late.json()["error"]["message"].startswith("Request timed out after 10s")
    # The access line is written as the request ends, which may be after its client has read it.
    poll(lambda: access_status(server, path), timeout=30, fail=True)
    assert access_status(server, path) == [504]
    poll(lambda: metric(server.base_url, ACTIVE, model) == 0, timeout=60, fail=True)
    second = httpx.post(server.base_url + path, json=small(path, model), timeout=120)
    assert second.status_code == 200, second.text


def _one(path: str) -> dict[str, Any]:
    """The big request cut to one long input."""
    return {"documents": [LONG]} if path == "/v1/rerank" else {"input": [LONG]}
