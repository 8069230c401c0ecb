"""Model lifecycle against a real server: idle TTL unloading and auto-evict of JIT loads.

The per-request `ttl` (LM Studio's OpenAI-compatible extension) sets the idle TTL of the instance
the request used; the reaper runs every 0.2 s here. Auto-evict never unloads a model while a
request is using it: it goes once idle.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, assert_openai_error, metric, poll, scripted

pytestmark = pytest.mark.e2e

REAPER = {"reaper_interval_seconds": 0.2}
STREAM_WORDS = [f"w{i}" for i in range(60)]  # scripts/lifecycle_stream.yaml
DEADLINE = 30.0  # generous: a loaded 2-core machine may be slow, never this slow


def loaded(base_url: str, key: str) -> list[str]:
    response = httpx.get(base_url + "/api/v1/models", timeout=10)
    assert response.status_code == 200, response.text
    model = next(m for m in response.json()["models"] if m["key"] == key)
    return [i["id"] for i in model["loaded_instances"]]


@pytest.fixture(scope="module")
def ttl_server(start_server: StartServer) -> Server:
    return start_server(
        REAPER, [scripted("ttl-chat", "lmstudio_jit.yaml"), scripted("ttl-resp", "lmstudio_jit.yaml")]
    )


@pytest.fixture(scope="module")
def evict_server(start_server: StartServer) -> Server:
    return start_server(
        {**REAPER, "jit_auto_evict": True},
        [
            scripted("evict-a", "lifecycle_stream.yaml"),
            scripted("evict-b", "lmstudio_jit.yaml"),
            scripted("pinned", "chat.yaml"),
        ],
    )


def _ask(sdk: openai.OpenAI, route: str, model: str, **extra: Any) -> str:
    if route == "chat":
        completion = sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], extra_body=extra or None
        )
        return completion.choices[0].message.content or ""
    response = sdk.responses.create(model=model, input="hi", extra_body=extra or None)
    return response.output_text


@pytest.mark.parametrize(("route", "model"), [("chat", "ttl-chat"), ("responses", "ttl-resp")])
def test_a_request_ttl_unloads_the_model_once_idle_that_long(
    ttl_server: Server, route: str, model: str
) -> None:
    with openai.OpenAI(base_url=ttl_server.api_url, api_key="unused", max_retries=0, timeout=30) as sdk:
        assert _ask(sdk, route, model)  # JIT load; the default TTL is an hour
        assert loaded(ttl_server.base_url, model) == [model]
        assert _ask(sdk, route, model, ttl=1)
    poll(lambda: loaded(ttl_server.base_url, model) == [], DEADLINE, 0.1, fail=True)
    with openai.OpenAI(base_url=ttl_server.api_url, api_key="unused", max_retries=0, timeout=30) as sdk:
        assert _ask(sdk, route, model)  # loads again on the next request
    assert loaded(ttl_server.base_url, model) == [model]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize("ttl", ["soon", 0, -5])
def test_a_bad_ttl_is_a_400_naming_it(ttl_server: Server, path: str, ttl: Any) -> None:
    body: dict[str, Any] = {"model": "ttl-chat", "ttl": ttl}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"input": "hi"}
    response = httpx.post(ttl_server.base_url + path, json=body, timeout=10)
    assert_openai_error(response, 400, param="ttl", type="invalid_request_error")


def test_auto_evict_waits_for_the_running_request_then_evicts(evict_server: Server) -> None:
    base = evict_server.base_url
    pinned = httpx.post(base + "/api/v1/models/load", json={"model": "pinned"}, timeout=30)
    assert pinned.status_code == 200, pinned.text
    with openai.OpenAI(base_url=evict_server.api_url, api_key="unused", max_retries=0, timeout=60) as sdk:
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]
        with sdk.chat.completions.stream(model="evict-a", messages=messages) as stream:
            deltas: list[str] = []
            for event in stream:  # up to the first words: evict-a is loaded and busy
                if event.type == "content.delta":
                    deltas.append(event.delta)
                    break
            # A JIT load of evict-b, with auto-evict on: evict-b loads, evict-a keeps running.
            other = sdk.chat.completions.create(model="evict-b", messages=messages)
            assert other.choices[0].message.content
            # Still mid-stream (60 words at 0.1 s): evict-a is running and must still be loaded.
            assert metric(base, "sluicegate_generations_active", "evict-a") == 1
            assert loaded(base, "evict-a") == ["evict-a"]
            assert loaded(base, "evict-b") == ["evict-b"]
            deltas += [e.delta for e in stream if e.type == "content.delta"]
            final = stream.get_final_completion()
    assert "".join(deltas) == " ".join(STREAM_WORDS)  # intact, start to end
    assert final.choices[0].finish_reason == "stop"
    poll(lambda: loaded(base, "evict-a") == [], DEADLINE, 0.1, fail=True)  # evicted once idle
    assert loaded(base, "evict-b") == ["evict-b"]
    assert loaded(base, "pinned") == ["pinned"]  # explicitly loaded: never auto-evicted
