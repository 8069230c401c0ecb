"""Helpers for the gateway (`engine = "openai"`) end-to-end tests: model tables that point a
Sluicegate model at one scenario of the fake upstream (tests/fakes/fake_upstream.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from fake_upstream import FakeUpstream

REPLICA_HEADER = "x-sluicegate-replica"


def upstream_model(
    model_id: str, *fakes: FakeUpstream | str, scenario: str | None = None, **table: Any
) -> dict[str, Any]:
    """A `[[models]]` table serving `model_id` from these upstreams (a str is a base URL), asking
    them for the model `scenario` (default: the id)."""
    urls = [f if isinstance(f, str) else f.base_url for f in fakes]
    where: dict[str, Any] = {"base_url": urls[0]} if len(urls) == 1 else {"base_urls": urls}
    return {"id": model_id, "engine": "openai", **where, "upstream_model": scenario or model_id, **table}


def dead_url() -> str:
    """A loopback URL nothing listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def unanswered_url() -> Iterator[str]:
    """A loopback URL whose connections never complete: a listener that never accepts, its
    backlog already full, so new connection attempts hang (for connect timeouts)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
