"""A heavy request check does not stall the server: while llama.cpp tokenizes a 12 MB prompt
(seconds of CPU), decodes 16 large images or embeds hundreds of inputs, a second client polling
/health every 100 ms is answered. The checks once ran on the event loop: a 15 MB /api/chat prompt
held every other client, /health included, 14.5 s; 16 PNGs of 5600² 16.9 s; `/api/embed` with
20,000 inputs 2.2 s."""

from __future__ import annotations

import base64
import io
import itertools
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server
from PIL import Image

pytestmark = pytest.mark.e2e

PROMPT = "The weather in Paris is sunny and the fox is quick. " * 240_000  # 12 MB
SIDE = 2496  # 16 of these are 99.7 MP: just within the default budget of a request's pixels (100 MP)


def answered_throughout(base_url: str, heavy: Callable[[], httpx.Response]) -> httpx.Response:
    """`heavy()`'s answer, asserting /health (polled every 100 ms) was answered all along while
    it was in flight: no wait for /health anywhere near as long as the heavy request (a stalled
    loop answers one poll before it and the next after it)."""
    stop = threading.Event()
    answered: list[tuple[float, float]] = []  # (sent, answered), monotonic

    def poll_health() -> None:
        with httpx.Client(base_url=base_url, timeout=120) as client:
            while not stop.is_set():
                sent = time.monotonic()
                assert client.get("/health").status_code == 200
                answered.append((sent, time.monotonic()))
                stop.wait(0.1)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        started = time.monotonic()
        response = heavy()
        finished = time.monotonic()
    finally:
        stop.set()
        poller.join()
    times = [started, *(a for _, a in answered if started < a < finished), finished]
    longest = max(later - earlier for earlier, later in itertools.pairwise(times))
    assert len(times) > 4 and longest < (finished - started) / 2, (
        len(times) - 2,
        longest,
        finished - started,
    )
    return response


def test_health_is_answered_while_a_long_prompt_is_tokenized(llama_server: Server) -> None:
    heavy = answered_throughout(
        llama_server.base_url,
        lambda: httpx.post(
            llama_server.base_url + "/api/chat",
            json={"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "stream": False},
            timeout=300,
        ),
    )
    error = heavy.json()["error"]
    assert heavy.status_code == 400 and "tokens) exceeds the available context" in error  # it was tokenized


def test_health_is_answered_while_large_images_are_decoded(
    start_server: StartServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from sluicegate.demo.vision import make_demo_vision

    eye = tmp_path_factory.mktemp("stall-eye") / "eye.gguf"
    make_demo_vision(eye, ends_replies=False)  # writes mmproj-eye.gguf beside it
    server = start_server(
        models=[{"id": "eye", "engine": "llamacpp", "path": str(eye), "context_length": 1024}]
    )
    images = []
    for shade in range(16):  # one color each: ~23 KB of PNG, 19 MB of pixels decoded
        out = io.BytesIO()
        Image.new("RGB", (SIDE, SIDE), (shade * 15, 80, 200 - shade * 10)).save(out, "PNG")
        images.append("data:image/png;base64," + base64.b64encode(out.getvalue()).decode())
    content = [{"type": "text", "text": "What is this?"}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    body = {"model": "eye", "messages": [{"role": "user", "content": content}], "max_tokens": 1}
    heavy = answered_throughout(
        server.base_url, lambda: httpx.post(server.api_url + "/chat/completions", json=body, timeout=300)
    )
    # Every image decoded and preprocessed through the projector, then the reply (one token).
    assert heavy.status_code == 200, heavy.text[:500]
    assert heavy.json()["usage"]["prompt_tokens"] > 16 * 16, heavy.text[:500]  # the images' tokens


def test_health_is_answered_while_many_inputs_are_embedded(llama_server: Server) -> None:
    # Each input is tokenized and decoded (~0.15 s each on a loaded 2-core machine): 64 of them,
    # not the 2,048 a request may have, keep the test to seconds; the loop does as little either way.
    inputs = [f"Input {i}: the weather in Paris is sunny and the fox is quick." for i in range(64)]
    heavy = answered_throughout(
        llama_server.base_url,
        lambda: httpx.post(
            llama_server.base_url + "/api/embed", json={"model": "tiny-embed", "input": inputs}, timeout=300
        ),
    )
    assert heavy.status_code == 200, heavy.text[:500]
    assert len(heavy.json()["embeddings"]) == 64
