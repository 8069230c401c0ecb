"""A heavy request check does not stall the server: while llama.cpp tokenizes a 12 MB prompt
(seconds of CPU), a second client polling /health every 100 ms is answered. The check once ran
on the event loop: a 15 MB /api/chat prompt held every other client, /health included, 14.5 s."""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

PROMPT = "The weather in Paris is sunny and the fox is quick. " * 240_000  # 12 MB


def test_health_is_answered_while_a_long_prompt_is_tokenized(llama_server: Server) -> None:
    stop = threading.Event()
    answered: list[tuple[float, float]] = []  # (sent, answered), monotonic

    def poll_health() -> None:
        with httpx.Client(base_url=llama_server.base_url, timeout=120) as client:
            while not stop.is_set():
                sent = time.monotonic()
                assert client.get("/health").status_code == 200
                answered.append((sent, time.monotonic()))
                stop.wait(0.1)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        started = time.monotonic()
        heavy = httpx.post(
            llama_server.base_url + "/api/chat",
            json={"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "stream": False},
            timeout=300,
        )
        finished = time.monotonic()
    finally:
        stop.set()
        poller.join()
    assert heavy.status_code == 400 and "tokens, more than" in heavy.json()["error"]  # it was tokenized
    # Answered all along while it was in flight: no wait for /health anywhere near as long as
    # the heavy request (a stalled loop answers one poll before it and the next after it).
    times = [started, *(a for _, a in answered if started < a < finished), finished]
    longest = max(later - earlier for earlier, later in itertools.pairwise(times))
    assert len(times) > 4 and longest < (finished - started) / 2, (
        len(times) - 2,
        longest,
        finished - started,
    )
