"""Backpressure end to end: a client that stops reading stops the upstream, in every dialect.

A fake upstream floods 1,000,000 tokens as fast as it is read. One client per dialect (every
chat route the app serves: a new dialect without a request here fails the test) opens a stream over a socket with a tiny receive buffer and then read nothing for 20 s. The
server must stop pulling from the upstream (TCP flow control reaches it: the fake's writes stop
being accepted) instead of draining it into memory, and its RSS must stay within a bound:
+20 MiB over the idle server for three streams together, so 20 MiB * dialects / 3 for all of
them (the per-stream outbox is
`stream_buffer_bytes`, 256 KiB by default; the rest is socket buffers, which are the kernel's).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from e2e_support import read_metrics, run_server, write_config
from fake_upstream import FakeUpstream, Observed, Scenario, chunk
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

FLOOD = 1_000_000
STALL_SECONDS = 20.0
RSS_BOUND_KIB_PER_3 = 20 * 1024  # the bound for three stalled readers, scaled to every dialect

REQUESTS = {
    "chat_completions": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}),
    "responses": ("/v1/responses", {"input": "go"}),
    "lmstudio": ("/api/v1/chat", {"input": "go"}),
    # Anthropic once kept orjson's 4 KiB buffer per waiting frame: 13-17 MB per stalled stream.
    "anthropic": ("/v1/messages", {"messages": [{"role": "user", "content": "go"}], "max_tokens": 4096}),
    "completions": ("/v1/completions", {"prompt": "go", "max_tokens": 2_000_000}),
    "infill": ("/infill", {"input_prefix": "def f(", "input_suffix": ")", "n_predict": 2_000_000}),
    "llamaserver": ("/completion", {"prompt": "go", "n_predict": 2_000_000}),
    "ollama_chat": ("/api/chat", {"messages": [{"role": "user", "content": "go"}]}),
    "ollama_generate": ("/api/generate", {"prompt": "go"}),
}


def test_every_chat_route_has_a_slow_reader(tmp_path: Path) -> None:
    from sluicegate.app.factory import create_app
    from sluicegate.config import load_settings
    from sluicegate.turn.runner import TurnEndpoint

    config = write_config(tmp_path, {}, [])
    app = create_app(load_settings(config, env={}))
    # Each turn runner, by the paths it answers (a route may answer more than one: `/v1`-less).
    runners: dict[int, set[str]] = {}
    for route in app.routes:
        runner = getattr(route, "app", None) or getattr(route, "endpoint", None)
        if isinstance(runner, TurnEndpoint):
            runners.setdefault(id(runner), set()).add(route.path)  # type: ignore[attr-defined]
    requested = {path for path, _ in REQUESTS.values()}
    assert all(paths & requested for paths in runners.values()), runners
    assert requested <= set().union(*runners.values())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def slow_reader(port: int, path: str, body: dict[str, object]) -> socket.socket:
    """A streaming request over a socket that will read (almost) nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    payload = json.dumps({"model": "flood", "stream": True, **body}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    sock.sendall(head + payload)
    return sock


def flooded(fake: FakeUpstream) -> list[Observed]:
    """The upstream requests of the slow readers (chat and legacy completions alike)."""
    return [
        r
        for r in fake.requests
        if r.method == "POST" and isinstance(r.body, dict) and r.body.get("model") == "flood"
    ]


def test_a_client_that_stops_reading_pauses_the_upstream_in_every_dialect(tmp_path: Path) -> None:
    with FakeUpstream(name="flood") as fake:
        fake.scenarios["flood"] = Scenario(frames=[chunk(finish_reason="stop")], flood=FLOOD)
        config = write_config(tmp_path, {}, [upstream_model("flood", fake)])
        with run_server(tmp_path, config) as server:
            port = int(server.base_url.rsplit(":", 1)[1])
            pid = server.process.pid
            baseline = rss_kib(pid)
            sockets = {name: slow_reader(port, path, body) for name, (path, body) in REQUESTS.items()}
            try:
                observed = fake.wait_for(lambda: len(flooded(fake)) == len(REQUESTS) and flooded(fake))
                time.sleep(STALL_SECONDS / 2)
                halfway = [o.frames_sent for o in observed]
                time.sleep(STALL_SECONDS / 2)
                end = [o.frames_sent for o in observed]
                grown = rss_kib(pid) - baseline
                # Paused, not drained: each upstream stream is stuck far from its end, and stayed
                # where it was over the last ten seconds.
                assert all(sent < FLOOD // 4 for sent in end), end
                assert end == halfway, (halfway, end)
                assert not any(o.finished for o in observed)
                bound = RSS_BOUND_KIB_PER_3 * len(REQUESTS) // 3
                assert grown < bound, f"server RSS grew by {grown} KiB with {len(REQUESTS)} stalled streams"
            finally:
                for sock in sockets.values():
                    sock.close()
            # The clients left: every upstream request is closed, nothing stays in flight.
            fake.wait_for(lambda: all(o.disconnected_at is not None for o in observed), timeout=10)

            def settled() -> bool:
                metrics = read_metrics(server.base_url)
                in_flight = sum(
                    v for (name, _), v in metrics.items() if name == "sluicegate_requests_in_flight"
                )
                active = sum(v for (name, _), v in metrics.items() if name == "sluicegate_generations_active")
                return in_flight == 0 and active == 0

            fake.wait_for(settled, timeout=10)
