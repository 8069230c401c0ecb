"""A bug that escapes a route before its response starts: the plain 500 Starlette's error
middleware answered, now answered by the observer (the app drops that middleware: one layer,
and a frame every stream holds, less), byte for byte; after the start, the stream's end."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from sluicegate.app.factory import SluicegateApp
from sluicegate.observe import requests as observe
from sluicegate.observe.metrics import Metrics


async def crash(request: Request) -> Response:
    raise RuntimeError("a bug")


def answers(app: Starlette) -> tuple[int, bytes, list[tuple[str, str]]]:
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/crash")
    headers = [(k, v) for k, v in response.headers.items()]
    return response.status_code, response.content, headers


def test_the_crash_answer_is_starlette_s(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics()
    monkeypatch.setattr(observe, "METRICS", metrics)
    routes = [Route("/crash", crash)]
    ours = SluicegateApp(
        routes=routes, middleware=[Middleware(observe.ObserveMiddleware, dialect_of=lambda p: "x")]
    )
    starlette = Starlette(routes=routes)
    assert (
        answers(ours)
        == answers(starlette)
        == (
            500,
            b"Internal Server Error",
            [("content-length", "21"), ("content-type", "text/plain; charset=utf-8")],
        )
    )
    assert not isinstance(ours.middleware_stack, ServerErrorMiddleware)
    assert 'status="500"' in metrics.render()


def test_an_app_with_a_500_handler_keeps_the_middleware() -> None:
    """Starlette runs a 500 handler from that middleware: it stays then."""

    async def handler(request: Request, exc: Exception) -> Response:
        return Response("mine", status_code=500)

    app = SluicegateApp(routes=[Route("/crash", crash)], exception_handlers={500: handler})
    assert answers(app)[:2] == (500, b"mine")
    assert isinstance(app.middleware_stack, ServerErrorMiddleware)
