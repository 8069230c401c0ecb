"""A client that goes away stops llama.cpp within a token; busy instances queue or run in parallel."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from e2e_support import Server, chat_body, metric, poll

pytestmark = pytest.mark.e2e

TOKENS = "sluicegate_llamacpp_tokens_generated_total"
ACTIVE = "sluicegate_generations_active"


def test_disconnect_stops_generation(llama_server: Server) -> None:
    model, limit = "tiny-cancel", 2000
    body = chat_body(model, "Write a very long story.", max_tokens=limit, stream=True)
    with (
        httpx.Client(base_url=llama_server.base_url, timeout=30.0) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        for count, _ in enumerate(response.iter_lines()):
            if count > 10:
                break  # leaving the block closes the connection mid-stream

    # The server saw the disconnect and ended the generation (its slot is free) ...
    assert poll(lambda: metric(llama_server.base_url, ACTIVE, model) == 0, timeout=20), "still running"
    final = metric(llama_server.base_url, TOKENS, model)
    assert 0 < final < limit, final  # stopped early
    # ... and no token more comes while another model on the same weights generates twenty.
    probe = httpx.post(
        llama_server.base_url + "/v1/chat/completions",
        json=chat_body("tiny", "Count.", max_tokens=20),
        timeout=60,
    )
    assert probe.json()["usage"]["completion_tokens"] == 20
    assert metric(llama_server.base_url, TOKENS, model) == final


def _reply(server: Server, model: str, seed: int) -> tuple[str, str | None]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60.0) as sdk:
        reply = sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=100,
            seed=seed,
            temperature=1.0,
        )
    return reply.choices[0].message.content or "", reply.choices[0].finish_reason


@pytest.mark.parametrize("model", ["tiny", "tiny-parallel"])
def test_concurrent_requests_all_finish(llama_server: Server, model: str) -> None:
    """`tiny` decodes them together (continuous batching); `tiny-parallel` (batching off, one
    sequence per context) sends the second to another instance and queues the third."""
    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda seed: _reply(llama_server, model, seed), [1, 2, 1]))
    assert all(text and finish == "length" for text, finish in replies)
    assert replies[0] == replies[2] != replies[1]  # same seed, same text, whichever instance ran it
    if model == "tiny-parallel":
        listing = httpx.get(llama_server.base_url + "/api/v1/models", timeout=10).json()["models"]
        entry = next(m for m in listing if m["key"] == model)
        assert [i["id"] for i in entry["loaded_instances"]] == [model, f"{model}:2"]
