"""The local-engine benches read a streamed chat completion through one reader
(`bench/local_engine.py` `read_stream`): `batching.py`'s `stream` and `request_split.py`'s
`timed` both take their figures from it. Served here by a canned SSE answer in each server's
shape: llama-server's (its own `timings`) and Sluicegate's (usage with cached tokens)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _delta(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
LLAMA_SERVER = _sse(
    ROLE,
    _delta("Once"),
    _delta(" upon"),
    _delta(" a time", "length"),
    {
        "choices": [],
        "usage": {"prompt_tokens": 40, "completion_tokens": 3},
        "timings": {"prompt_n": 31, "prompt_ms": 12.5, "predicted_ms": 7.0},
    },
)
SLUICEGATE = _sse(
    ROLE,
    _delta("Once"),
    _delta(""),  # an empty delta is no content
    _delta(" upon", "stop"),
    {
        "choices": [],
        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 9}},
    },
)


class _Server:
    def __init__(self) -> None:
        self.answer = b""
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                assert self.path == "/v1/chat/completions"
                server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(server.answer)))
                self.end_headers()
                self.wfile.write(server.answer)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import each other by module name
    fake = _Server()
    thread = threading.Thread(target=fake.http.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.http.shutdown()
        fake.http.server_close()
        for name in ("local_engine", "batching", "request_split", "batch_counts"):
            sys.modules.pop(name, None)


def test_the_reader_reads_a_stream_in_order(server: _Server) -> None:
    from local_engine import read_stream

    server.answer = LLAMA_SERVER
    reply = read_stream(server.url, {"model": "bench", "stream": True})
    assert server.bodies == [{"model": "bench", "stream": True}]
    assert len(reply.times) == 3  # the role chunk and the usage chunk carry no content
    assert reply.sent <= reply.head <= reply.times[0] <= reply.times[-1] <= reply.end
    assert reply.finish == "length"
    assert reply.tokens == 3
    assert reply.timings["prompt_n"] == 31


def test_batching_and_request_split_take_their_figures_from_it(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import batching
    import local_engine
    import request_split

    server.answer = SLUICEGATE
    evaluated: list[int] = []
    reply = batching.stream(server.url, "hello", 8, evaluated, {"temperature": 0})
    assert type(reply) is local_engine.Streamed
    assert (len(reply.times), reply.finish, reply.tokens, evaluated) == (2, "stop", 2, [31])  # 40 - 9 cached
    assert server.bodies[-1]["stream_options"] == {"include_usage": True}
    assert server.bodies[-1]["temperature"] == 0

    calls: list[str] = []
    real = local_engine.read_stream

    def counted(base_url: str, body: dict[str, Any], timeout: float = 900) -> local_engine.Streamed:
        calls.append(base_url)
        return real(base_url, body, timeout)

    monkeypatch.setattr(batching, "read_stream", counted)  # the name batching.stream calls
    server.answer = LLAMA_SERVER
    row = request_split.timed(server.url, "hello", 8, {})
    assert calls == [server.url]  # through the one reader, not a copy
    assert row["completion tokens"] == 3
    assert row["prompt tokens"] == 40
    assert row["prompt tokens decoded"] == 31  # llama-server's own count
    assert row["server: prompt decode ms"] == 12.5
    assert row["head ms"] <= row["TTFT ms"] <= row["wall ms (sent to last delta)"]
