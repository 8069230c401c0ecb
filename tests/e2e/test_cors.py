"""CORS against a real server: preflights answered before the key check, the headers on every
answer to an allowed origin (a stream's in each dialect included), none for any other — then a
page served from another loopback origin, in Chromium, streams a chat from the server with
`cors_origins` set and is refused without it."""

from __future__ import annotations

import httpx
import pytest
from conftest import StartServer
from cors_support import AUTH, KEY, MODELS, page_origin
from e2e_support import Server

pytestmark = pytest.mark.e2e

__all__ = ["page_origin"]

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
WAIT = 30.0  # an upper bound for the browser's script, never a pass condition


@pytest.fixture(scope="module")
def allowing(start_server: StartServer, page_origin: str) -> Server:
    return start_server({"api_key": KEY, "cors_origins": [page_origin]}, MODELS)


@pytest.fixture(scope="module")
def refusing(start_server: StartServer) -> Server:
    return start_server({"api_key": KEY}, MODELS)


def test_preflight_needs_no_key(allowing: Server, page_origin: str) -> None:
    response = httpx.options(
        allowing.base_url + "/v1/chat/completions",
        headers={
            "Origin": page_origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == page_origin
    assert response.headers["access-control-allow-headers"] == "authorization, content-type"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/responses", {"model": "chat", "input": "hi", "stream": True}),
        ("/v1/messages", {"model": "chat", "max_tokens": 50, "messages": CHAT["messages"], "stream": True}),
        ("/api/v1/chat", {"model": "chat", "input": "hi", "stream": True}),
        ("/api/chat", {"model": "chat", "messages": CHAT["messages"]}),
        ("/v1/completions", {"model": "chat", "prompt": "hi", "stream": True}),
    ],
)
def test_every_dialects_stream_carries_the_header(
    allowing: Server, page_origin: str, path: str, body: dict[str, object]
) -> None:
    headers = AUTH | {"Origin": page_origin}
    with httpx.stream("POST", allowing.base_url + path, json=body, headers=headers, timeout=WAIT) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["access-control-allow-origin"] == page_origin
        assert "".join(response.iter_text())  # the whole stream arrives


def test_a_simple_request_and_an_error_carry_it(allowing: Server, page_origin: str) -> None:
    models = httpx.get(allowing.base_url + "/v1/models", headers=AUTH | {"Origin": page_origin})
    assert models.status_code == 200 and models.headers["access-control-allow-origin"] == page_origin
    refused = httpx.get(allowing.base_url + "/v1/models", headers={"Origin": page_origin})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == page_origin


def test_another_origin_gets_none(allowing: Server, refusing: Server, page_origin: str) -> None:
    for server, origin in ((allowing, "http://127.0.0.1:1"), (refusing, page_origin)):
        response = httpx.options(
            server.base_url + "/v1/chat/completions",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        )
        # with CORS on, an empty 200 (llama-server's); off, what the server answered before CORS
        assert response.status_code in ((200,) if server is allowing else (401, 405))
        assert "access-control-allow-origin" not in response.headers
