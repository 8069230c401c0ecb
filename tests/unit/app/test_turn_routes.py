"""server.TurnRoutes: the chat routes skip the router and exception middleware, nothing else does."""

from __future__ import annotations

from typing import Any, cast

import pytest

from sluicegate.app.factory import TurnRoutes


class _App:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[str] = []

    def __call__(self, scope: Any, receive: Any, send: Any) -> object:
        self.calls.append(scope["path"])
        return (self.name, scope["path"])  # what the caller awaits: handed on as it is


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/chat/completions", "turn"),
        ("GET", "/v1/chat/completions", "router"),  # the router's 405, in the dialect's shape
        ("POST", "/v1/chat/completions/", "router"),  # the router's redirect
        ("POST", "/v1/responses/compact", "router"),
        ("GET", "/health", "router"),
    ],
)
def test_dispatch(method: str, path: str, expected: str) -> None:
    router, turn = _App("router"), _App("turn")
    routes = TurnRoutes(cast(Any, router), {"/v1/chat/completions": cast(Any, turn)})
    scope = {"type": "http", "method": method, "path": path}
    assert cast(object, routes(scope, _never, _never)) == (expected, path)


def test_websockets_go_to_the_router() -> None:
    router, turn = _App("router"), _App("turn")
    routes = TurnRoutes(cast(Any, router), {"/v1/responses": cast(Any, turn)})
    scope = {"type": "websocket", "path": "/v1/responses"}
    assert cast(object, routes(scope, _never, _never)) == ("router", "/v1/responses")
    assert turn.calls == []


def test_uvicorn_takes_the_app_for_asgi3_with_no_adapter() -> None:
    """`SluicegateApp.__call__` is a plain call handing on the middleware's awaitable (no
    coroutine frame a request passes through); marked so that uvicorn does not take it for an
    ASGI 2 app and wrap it in its adapter (a layer more than before)."""
    import uvicorn

    from sluicegate.app.factory import SluicegateApp

    app = SluicegateApp()
    config = uvicorn.Config(app, proxy_headers=False, log_level="error")
    config.load()
    assert config.loaded_app is app


@pytest.mark.parametrize(
    ("options", "layers"),
    [
        ({}, ["ObserveMiddleware", "TurnRoutes"]),
        ({"cors_origins": ["*"]}, ["ObserveMiddleware", "CORSMiddleware", "TurnRoutes"]),
        ({"api_keys": ["k"]}, ["ObserveMiddleware", "APIKeyMiddleware", "TurnRoutes"]),
        ({"admin_key": "a"}, ["ObserveMiddleware", "APIKeyMiddleware", "TurnRoutes"]),
    ],
)
def test_a_layer_is_in_the_stack_only_when_it_has_something_to_do(
    tmp_path: Any, options: dict[str, Any], layers: list[str]
) -> None:
    from sluicegate.app.factory import create_app
    from sluicegate.config import Settings

    app = create_app(Settings(data_dir=tmp_path, **options))
    layer: Any = app.build_middleware_stack()
    names = []
    while not isinstance(layer, TurnRoutes):
        names.append(type(layer).__name__)
        layer = layer.app
    assert [*names, "TurnRoutes"] == layers
