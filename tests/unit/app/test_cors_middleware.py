"""sluicegate.app.cors: preflights answered before the key check, CORS headers on every answer to
an allowed origin (routes, errors, 401s, streams), none for any other."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from sluicegate.app.auth import APIKeyMiddleware
from sluicegate.app.cors import CORSMiddleware, normal_origin

PAGE = "http://127.0.0.1:5173"
OTHER = "http://evil.example"
PREFLIGHT = {
    "Origin": PAGE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


async def ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


def client(origins: list[str], keys: list[str] | None = None) -> TestClient:
    app = Starlette(
        routes=[Route("/v1/models", ok), Route("/v1/chat/completions", stream, methods=["POST"])],
        middleware=[
            Middleware(CORSMiddleware, origins=origins),
            Middleware(APIKeyMiddleware, api_keys=keys or []),
        ],
    )
    return TestClient(app)


def test_preflight_is_answered_before_the_key_check() -> None:
    response = client([PAGE], keys=["sk-one"]).options("/v1/chat/completions", headers=PREFLIGHT)
    assert response.status_code == 200  # llama-server's status
    assert response.headers["access-control-allow-origin"] == PAGE
    assert "POST" in response.headers["access-control-allow-methods"]
    assert response.headers["access-control-allow-headers"] == "authorization, content-type"
    assert "Origin" in response.headers["vary"]


def test_preflight_from_a_private_network_page() -> None:
    headers = PREFLIGHT | {"Access-Control-Request-Private-Network": "true"}
    response = client(["*"]).options("/v1/models", headers=headers)
    assert response.headers["access-control-allow-private-network"] == "true"


def test_a_simple_request_gets_the_headers() -> None:
    response = client([PAGE]).get("/v1/models", headers={"Origin": PAGE})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == PAGE
    assert response.headers["access-control-expose-headers"] == "*"


def test_a_stream_gets_the_headers() -> None:
    response = client(["*"]).post("/v1/chat/completions", headers={"Origin": PAGE})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == PAGE
    assert response.text.endswith("data: [DONE]\n\n")


def test_a_refused_key_is_still_readable_by_the_page() -> None:
    """The 401 carries the headers: the page can show why, instead of a bare network error."""
    response = client([PAGE], keys=["sk-one"]).get("/v1/models", headers={"Origin": PAGE})
    assert response.status_code == 401
    assert response.headers["access-control-allow-origin"] == PAGE


@pytest.mark.parametrize(("origins", "status"), [([], 405), ([PAGE], 200), (["localhost"], 200)])
def test_other_origins_get_nothing(origins: list[str], status: int) -> None:
    test = client(origins)
    preflight = test.options("/v1/chat/completions", headers=PREFLIGHT | {"Origin": OTHER})
    # without CORS, the router's answer; with it, an empty 200 on every path, as llama-server's
    assert preflight.status_code == status
    assert "access-control-allow-origin" not in preflight.headers
    simple = test.get("/v1/models", headers={"Origin": OTHER})
    assert simple.status_code == 200 and "access-control-allow-origin" not in simple.headers


def test_no_origins_configured_is_today() -> None:
    response = client([]).options("/v1/chat/completions", headers=PREFLIGHT)
    assert response.status_code == 405 and "access-control-allow-origin" not in response.headers


def test_origins_compare_as_browsers_send_them() -> None:
    assert normal_origin(" HTTP://LocalHost:5173/ ") == "http://localhost:5173"
    test = client(["HTTP://127.0.0.1:5173/"])
    assert test.get("/v1/models", headers={"Origin": PAGE}).headers["access-control-allow-origin"] == PAGE


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost", True),
        ("http://localhost:8080", True),
        ("https://127.0.0.1:3000", True),
        ("http://[::1]:3000", True),
        ("http://localhost.evil.com", False),
        ("http://notlocalhost", False),
        ("http://evil.com", False),
        ("http://[::1", False),  # malformed: not local, and no error
    ],
)
def test_localhost_allows_any_port_on_this_machine(origin: str, allowed: bool) -> None:
    """llama-server's `--cors-origins localhost`: a loopback host, any scheme and port."""
    response = client(["localhost"]).options("/v1/chat/completions", headers=PREFLIGHT | {"Origin": origin})
    assert response.status_code == 200
    assert response.headers.get("access-control-allow-origin") == (origin if allowed else None)


def test_preflight_methods_are_llama_servers_plus_one_asked_for() -> None:
    answer = client([PAGE]).options("/v1/chat/completions", headers=PREFLIGHT)
    assert answer.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert "access-control-allow-credentials" not in answer.headers  # keys go in a header, never cookies
    patch = client([PAGE]).options(
        "/v1/models", headers={**PREFLIGHT, "Access-Control-Request-Method": "PATCH"}
    )
    assert patch.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS, PATCH"
