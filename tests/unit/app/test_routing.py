"""app/routing.py: the router that finds parameterless routes by path answers every request
with the route Starlette's own router picks, on the app's real route table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.routing import BaseRoute, Mount, Route, Router, WebSocketRoute

from sluicegate.app.factory import create_app
from sluicegate.app.routing import ExactRouter, exact_table
from sluicegate.config import Settings


class Marker:
    """An ASGI app (not a function: Starlette would take that for a request handler) that
    notes in the scope which route it is."""

    def __init__(self, name: object) -> None:
        self.name = name

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope["answered_by"] = self.name


def _marked(routes: list[BaseRoute]) -> list[BaseRoute]:
    """The app's route table with each endpoint replaced by one that says which it is."""
    marker = Marker
    marked: list[BaseRoute] = []
    for i, route in enumerate(routes):
        if isinstance(route, Route):
            marked.append(Route(route.path, marker(i), methods=route.methods))
        elif isinstance(route, WebSocketRoute):
            marked.append(WebSocketRoute(route.path, marker(i)))
        elif isinstance(route, Mount):
            marked.append(Mount(route.path, app=marker(i)))
        else:
            raise AssertionError(f"a route kind the test does not know: {route!r}")
    return marked


async def _answer(router: Router, method: str, path: str) -> tuple[object, ...]:
    scope: dict[str, Any] = {"type": "http", "method": method, "path": path, "root_path": "",
                             "query_string": b"", "headers": [], "app": None}  # fmt: skip
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message.get("status"))

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    try:
        await router.app(scope, receive, send)
    except Exception as exc:  # the 404 and 405: Starlette raises HTTPException from the router
        return ("raised", type(exc).__name__, getattr(exc, "status_code", None))
    return ("answered", scope.get("answered_by"), tuple(sent), scope.get("path_params"))


async def test_every_request_goes_where_starlettes_router_sends_it(tmp_path: Path) -> None:
    routes = _marked(list(create_app(Settings(data_dir=tmp_path)).routes))
    theirs, ours = Router(routes), ExactRouter(routes)
    paths = {getattr(r, "path", "") for r in routes}
    probes = {p.replace("{", "").replace("}", "").replace(":path", "") for p in paths}
    probes |= {p + "/" for p in probes} | {"/nope", "/v1/models/some/model", "/playground/app.js"}
    for path in sorted(probes):
        for method in ("GET", "POST", "DELETE", "PUT"):
            assert await _answer(ours, method, path) == await _answer(theirs, method, path), (method, path)
    assert len(exact_table(routes)) > 40  # most of them are found by path
    answered = [probe for probe in probes if (await _answer(ours, "GET", probe))[0] == "answered"]
    assert len(answered) > 30  # the probes reach routes, not only the 404


async def test_a_path_an_earlier_pattern_matches_stays_with_the_router() -> None:
    first, second = Marker("pattern"), Marker("exact")
    routes: list[BaseRoute] = [Route("/a/{x}", first), Route("/a/b", second), Route("/c", second)]
    assert list(exact_table(routes)) == ["/c"]
    assert (await _answer(ExactRouter(routes), "GET", "/a/b"))[1] == "pattern"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_one_path_with_a_route_per_method(method: str) -> None:
    get, post = Marker("GET"), Marker("POST")
    routes: list[BaseRoute] = [Route("/x", get, methods=["GET"]), Route("/x", post, methods=["POST"])]
    assert (await _answer(ExactRouter(routes), method, "/x"))[1] == method
