"""A client that goes away cancels the engine at once, and no work continues for it.

Observed through GET /metrics: `sluicegate_generations_active` drops to 0,
`sluicegate_generations_cancelled_total` goes up by one, and the live counter of engine deltas
stops moving. Each test has its own model (same slow script) so their metrics never mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest
from e2e_support import SLOW_WORDS, Server, chat_body, engine_window, metric, poll

pytestmark = pytest.mark.e2e

ACTIVE = "sluicegate_generations_active"
CANCELLED = "sluicegate_generations_cancelled_total"
DELTAS = "sluicegate_engine_deltas_total"
# Generous for a noisy 2-core machine; a 400-word script at 50 ms/word runs for 20 s.
CANCEL_BOUND = 1.0


def assert_cancelled_promptly(
    server: Server, model: str, cancelled_before: float, close: Callable[[], None]
) -> None:
    assert metric(server.base_url, ACTIVE, model) == 1, "the generation should be running"
    close()
    closed_at = time.monotonic()
    assert poll(lambda: metric(server.base_url, ACTIVE, model) == 0, timeout=2.0), "engine still running"
    elapsed = time.monotonic() - closed_at
    assert elapsed < CANCEL_BOUND, f"cancellation took {elapsed:.2f}s"
    assert poll(lambda: metric(server.base_url, CANCELLED, model) == cancelled_before + 1, timeout=1.0)
    # No work continues for the gone client: the engine's delta counter stands still while an
    # engine of the same pace produces six deltas.
    first = metric(server.base_url, DELTAS, model)
    engine_window(server.base_url, "pace", 6)
    second = metric(server.base_url, DELTAS, model)
    assert first == second, f"the engine kept producing deltas ({first} -> {second})"
    assert 0 < second < SLOW_WORDS / 2


def test_closing_a_raw_stream_cancels_the_engine(server: Server) -> None:
    model = "cancel-raw"
    cancelled_before = metric(server.base_url, CANCELLED, model)
    client = httpx.Client(base_url=server.base_url, timeout=10.0)
    request = client.build_request("POST", "/v1/chat/completions", json=chat_body(model, "go", stream=True))
    response = client.send(request, stream=True)
    try:
        assert response.status_code == 200
        # Keep the line iterator referenced: a dropped generator would close the stream early.
        lines = response.iter_lines()
        data_frames = 0
        while data_frames < 3:
            if next(lines).startswith("data: "):
                data_frames += 1

        def close() -> None:
            response.close()
            client.close()

        assert_cancelled_promptly(server, model, cancelled_before, close)
    finally:
        response.close()
        client.close()


def test_closing_an_sdk_stream_cancels_the_engine(server: Server) -> None:
    model = "cancel-sdk"
    cancelled_before = metric(server.base_url, CANCELLED, model)
    with openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0) as sdk:
        stream = sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "go"}], stream=True
        )
        received = []
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
            if len(received) >= 3:
                break
        assert received[1:] == ["word0", " word1"]
        assert_cancelled_promptly(server, model, cancelled_before, stream.close)


def test_abandoning_a_non_streaming_request_cancels_the_engine(server: Server) -> None:
    model = "cancel-nonstream"
    cancelled_before = metric(server.base_url, CANCELLED, model)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/chat/completions", json=chat_body(model, "go"), timeout=0.5)
    closed_at = time.monotonic()
    assert poll(lambda: metric(server.base_url, ACTIVE, model) == 0, timeout=2.0), "engine still running"
    assert time.monotonic() - closed_at < CANCEL_BOUND
    assert poll(lambda: metric(server.base_url, CANCELLED, model) == cancelled_before + 1, timeout=1.0)
    first = metric(server.base_url, DELTAS, model)
    engine_window(server.base_url, "pace", 6)
    assert metric(server.base_url, DELTAS, model) == first
    assert 0 < first < SLOW_WORDS / 2
