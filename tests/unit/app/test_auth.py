"""sluicegate.app.auth: API keys checked before routing, in the error shape of the path's API."""

from __future__ import annotations

from typing import Any, cast
from unittest import mock

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from sluicegate.app import auth
from sluicegate.app.auth import APIKeyMiddleware, is_open, key_matches, presented_key

KEYS = ["sk-one", "sk-two"]


async def ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


def client(keys: list[str]) -> TestClient:
    app = Starlette(
        routes=[Route("/health", ok), Route("/v1/models", ok), Route("/api/v1/models", ok)],
        middleware=[Middleware(APIKeyMiddleware, api_keys=keys)],
    )
    return TestClient(app)


def test_no_keys_no_auth() -> None:
    assert client([]).get("/v1/models").status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer sk-one"}, {"authorization": "bearer sk-two"}, {"x-api-key": "sk-two"}],
)
def test_a_configured_key_passes(headers: dict[str, str]) -> None:
    assert client(KEYS).get("/v1/models", headers=headers).status_code == 200


@pytest.mark.parametrize(
    "path", ["/v1/models", "/v1/unknown", "/api/v1/models", "/api/nope", "/v1/messages", "/metrics"]
)
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PATCH"])
def test_everything_else_is_401_first(path: str, method: str) -> None:
    response = client(KEYS).request(method, path, headers={"Authorization": "Bearer sk-three"})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body == {"type": "error", "error": {"type": "authentication_error", "message": auth.INCORRECT}}
    elif path.startswith("/api/v1/"):  # LM Studio's
        assert body["error"]["message"] == auth.INCORRECT and "param" not in body["error"]
    elif path.startswith("/api/"):  # the other /api/ paths are Ollama's: its error is a string
        assert body == {"error": auth.INCORRECT}
    else:
        assert body == {
            "error": {
                "message": auth.INCORRECT,
                "type": "authentication_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }


def test_missing_key_says_how_to_send_one() -> None:
    body = client(KEYS).get("/v1/models").json()
    assert body["error"]["message"] == auth.MISSING


def test_open_paths() -> None:
    assert client(KEYS).get("/health").status_code == 200
    assert all(is_open(p) for p in ["/health", "/v1/health", "/", "/playground", "/playground/app.js"])
    assert not any(is_open(p) for p in ["/healthz", "/playgroundx", "/v1/models", "//health"])


def test_presented_key() -> None:
    assert presented_key([(b"authorization", b"Bearer  k ")]) == b"k"
    assert presented_key([(b"authorization", b"Basic abc"), (b"x-api-key", b"k2")]) == b"k2"
    assert presented_key([]) is None


def test_every_key_is_compared_every_time() -> None:
    keys = [auth.digest(k) for k in (b"sk-one", b"sk-two", b"sk-three")]
    with mock.patch.object(auth.hmac, "compare_digest", wraps=auth.hmac.compare_digest) as compare:
        assert key_matches(b"sk-one", keys)
        assert compare.call_count == 3  # no early exit on the first match
        assert not key_matches(b"nope", keys)
        assert compare.call_count == 6


def test_websocket_without_a_key_is_closed() -> None:
    from starlette.websockets import WebSocket, WebSocketDisconnect

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.close()

    from starlette.routing import WebSocketRoute

    app = Starlette(
        routes=[WebSocketRoute("/v1/responses", ws)], middleware=[Middleware(APIKeyMiddleware, api_keys=KEYS)]
    )
    with pytest.raises(WebSocketDisconnect) as closed, TestClient(app).websocket_connect("/v1/responses"):
        pass
    assert closed.value.code == 1008


def test_a_request_that_passes_holds_no_frame_of_the_middleware() -> None:
    # A stream lasts as long as the inner app's awaitable: the middleware hands that on.
    handed: list[object] = []

    def inner(scope: object, receive: object, send: object) -> object:
        handed.append(object())
        return handed[-1]

    scope = {"type": "http", "path": "/v1/chat/completions", "headers": [(b"x-api-key", b"sk-one")]}
    assert APIKeyMiddleware(cast(Any, inner), KEYS)(scope, mock.Mock(), mock.Mock()) is handed[-1]
    assert APIKeyMiddleware(cast(Any, inner), [])(scope, mock.Mock(), mock.Mock()) is handed[-1]


def test_models_is_open_only_as_the_page() -> None:
    """`GET /models` is the page for a browser (open) and the listing for a client (keyed)."""
    page = {"path": "/models", "headers": [(b"accept", b"text/html,application/xhtml+xml")]}
    listing = {"path": "/models", "headers": [(b"accept", b"application/json")]}
    assert auth.is_open_request(page) and not auth.is_open_request(listing)
    assert not auth.is_open_request({"path": "/models", "headers": []})
