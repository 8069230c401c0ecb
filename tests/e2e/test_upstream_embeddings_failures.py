"""Embeddings through a misbehaving upstream: every bad answer is a 502 (a timeout a 504) in
the OpenAI error shape, on both embeddings routes, never a 500 and never a non-embeddings body
passed on as a 200; the upstream's clocks apply; a client that leaves closes the upstream
connection at once."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server, assert_openai_error
from fake_upstream import FakeUpstream, Scenario
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

TIMEOUT = 1.0
NOT_JSON = {
    "text": b"hello",
    "sse": b'data: {"object":"list"}\n\n',
    "html": b"<html><body>oops</body></html>",
    "empty": b"",
    "nan": b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[NaN]}]}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "bad-utf8": b'{"object":"list","data":[],"model":"\xff\xfe"}',
    "fake-gzip": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not really gzip",
}
NOT_EMBEDDINGS = {
    "array": b"[1,2,3]",
    "string": b'"x"',
    "null": b"null",
    "error-200": b'{"error":{"message":"boom"}}',
    "no-vectors": b'{"object":"list","data":[{"object":"embedding","index":0}]}',
}
SCENARIOS = {
    **{f"nj-{name}": Scenario(frames=[body] if body else [], done=False) for name, body in NOT_JSON.items()},
    **{f"ne-{name}": Scenario(frames=[body], done=False) for name, body in NOT_EMBEDDINGS.items()},
    "truncated": Scenario(frames=[b'{"object":"list","data":[{"embedding":[0.1,'], done=False, abrupt=True),
    "bad-chunking": Scenario(frames=[b"zz\r\nnot a chunk\r\n"], done=False, raw=True),
    "stall-headers": Scenario(headers_delay=3600),
    "stall-mid": Scenario(frames=[b'{"object":"list",', None], done=False),
}
TIMED = {"first_byte_timeout": TIMEOUT, "idle_timeout": TIMEOUT, "health_check_interval": 0}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="embeddings") as upstream:
        upstream.scenarios.update(SCENARIOS)
        yield upstream


@pytest.fixture(scope="module")
def server(start_server: StartServer, fake: FakeUpstream) -> Server:
    models = [upstream_model(name, fake, **TIMED) for name in SCENARIOS]
    models.append(upstream_model("fine", fake, **TIMED))
    # No clocks: only the client leaving ends these.
    for name in ("stall-headers", "stall-mid"):
        models.append(
            upstream_model(
                f"wait-{name}",
                fake,
                scenario=name,
                first_byte_timeout=0,
                idle_timeout=0,
                health_check_interval=0,
            )
        )
    return start_server({}, models)


def post(server: Server, path: str, model: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json={"model": model, "input": "hi"}, timeout=30)


@pytest.mark.parametrize("path", ["/v1/embeddings", "/api/v0/embeddings"])
@pytest.mark.parametrize("model", sorted(n for n in SCENARIOS if n != "stall-headers"))
def test_a_bad_upstream_answer_is_a_502(server: Server, path: str, model: str) -> None:
    response = post(server, path, model)
    status = 504 if model == "stall-mid" else 502
    error = assert_openai_error(response, status, param=None)
    assert error["type"] in ("api_error", "timeout_error")
    assert "embeddings" in error["message"] or "upstream" in error["message"].lower()


def test_a_good_answer_still_passes(server: Server) -> None:
    response = post(server, "/v1/embeddings", "fine")
    assert response.status_code == 200
    body = response.json()
    assert body["model"] == "fine" and len(body["data"][0]["embedding"]) == 3


def test_an_upstream_that_never_answers_is_a_504_after_first_byte_timeout(server: Server) -> None:
    error = assert_openai_error(post(server, "/v1/embeddings", "stall-headers"), 504, param=None)
    assert error["code"] == "upstream_first_byte_timeout"


@pytest.mark.parametrize("model", ["wait-stall-headers", "wait-stall-mid"])
def test_a_client_that_leaves_closes_the_upstream_connection(
    server: Server, fake: FakeUpstream, model: str
) -> None:
    scenario = model.removeprefix("wait-")

    def requests() -> list[Any]:
        return [
            r for r in fake.requests if r.path.endswith("/embeddings") and r.body.get("model") == scenario
        ]

    before = len(requests())
    payload = json.dumps({"model": model, "input": "hi"}).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        # The upstream has the request (and, mid-body, sent its first part): now leave.
        fake.wait_for(
            lambda: len(requests()) > before and (scenario == "stall-headers" or requests()[-1].frames_sent)
        )
    observed = requests()[-1]
    fake.wait_for(lambda: observed.disconnected_at is not None)  # it would otherwise stall for an hour
