"""Continuous batching through a real server: `parallel = 2` sequences of one context run
together, a third request queues with heartbeats, and a client that leaves frees its place."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from e2e_support import Server, chat_body

pytestmark = pytest.mark.e2e

MODEL = "tiny-batch"


@pytest.fixture(scope="module")
def batch_server(start_server: object, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    table = {
        "id": MODEL,
        "engine": "llamacpp",
        "path": gguf,
        "batch_size": 16,
        "context_length": 16384,  # long replies: the first two still run when the third comes
        "batching": True,
        "parallel": 2,
    }
    server: Server = start_server(server={"heartbeat_seconds": 0.1}, models=[table])  # type: ignore[operator]
    return server


def _frames(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """("heartbeat", "") or ("data", json text) per SSE frame, as they arrive."""
    for line in response.iter_lines():
        if line.startswith(":"):
            yield "heartbeat", ""
        elif line.startswith("data: "):
            yield "data", line[len("data: ") :]


def _drain(frames: Iterator[tuple[str, str]]) -> None:
    with contextlib.suppress(Exception):  # ends when the test closes the stream
        for _ in frames:
            pass


def _first_content(frames: Iterator[tuple[str, str]]) -> list[str]:
    """Kinds of frames up to and including the first one with content."""
    seen = []
    for kind, data in frames:
        seen.append(kind)
        if kind == "data" and data != "[DONE]":
            choices = json.loads(data).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                return seen
    raise AssertionError(f"the stream ended without content: {seen}")


def test_two_run_at_once_a_third_queues_with_heartbeats(batch_server: Server) -> None:
    listing = httpx.get(batch_server.base_url + "/api/v1/models", timeout=10).json()["models"]
    entry = next(m for m in listing if m["key"] == MODEL)
    assert entry["max_context_length"] >= 16384

    def body(prompt: str) -> dict[str, object]:
        return chat_body(MODEL, prompt, max_tokens=16000, stream=True)

    with httpx.Client(base_url=batch_server.base_url, timeout=60.0) as client:
        first = client.stream("POST", "/v1/chat/completions", json=body("Tell me a long story."))
        second = client.stream("POST", "/v1/chat/completions", json=body("Write a long poem."))
        one = first.__enter__()
        frames_one = _frames(one)
        _first_content(frames_one)
        two = second.__enter__()
        frames_two_iter = _frames(two)  # kept: a dropped generator would close the stream
        frames_two = _first_content(frames_two_iter)
        # The second got content while the first is still generating (16,000 tokens): both run.
        assert frames_two[-1] == "data"
        # Keep reading both (a client that stops reading is dropped by the transport's
        # backpressure, which would free its place).
        for frames in (frames_one, frames_two_iter):
            threading.Thread(target=_drain, args=(frames,), daemon=True).start()
        third = client.stream("POST", "/v1/chat/completions", json=body("Hello there."))
        three = third.__enter__()
        frames_three = _frames(three)
        # Queued (both sequences busy): heartbeats, and no content, until a place frees. (Were it
        # running, content would flow without the pauses that heartbeats fill.)
        heartbeats = 0
        for kind, data in frames_three:
            heartbeats += kind == "heartbeat"
            assert kind == "heartbeat" or '"content":""' in data or '"content"' not in data, data
            if heartbeats >= 3:
                break
        assert heartbeats >= 3
        first.__exit__(None, None, None)  # that client leaves: its sequence ends, a place frees
        seen = _first_content(frames_three)
        assert seen[-1] == "data"
        third.__exit__(None, None, None)
        second.__exit__(None, None, None)
    # The server is still healthy and serves a short request with both places free again.
    reply = httpx.post(
        batch_server.api_url + "/chat/completions",
        json=chat_body(MODEL, "Hi", max_tokens=8),
        timeout=60,
    ).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 8
