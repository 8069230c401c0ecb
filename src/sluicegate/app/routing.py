"""Starlette's router, finding a route by its exact path before trying patterns.

Starlette tries its routes in order, a regular expression each, until one matches: a
`GET /v1/models` went through the dialects' routes and every route before it (68 routes here).
Most paths have no parameters; those routes are found here by their path in a dict — the same
`Route` objects, handled as the router handles them — and only a path with parameters, or none
found, goes on to the router's own loop (the 404s, 405s and slash redirects are its own too).
A path an earlier route's pattern also matches stays out of the table, so which route answers a
request never changes: `tests/unit/app/test_routing.py` compares both routers on every route.

The chat routes never reach the router (`TurnRoutes`, `app/factory.py`, takes them by path
first); this is for the others.
"""

from __future__ import annotations

from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send


def exact_table(routes: list[BaseRoute]) -> dict[str, tuple[Route, ...]]:
    """Path → the parameterless HTTP routes of that path, in the router's order; a path that
    an earlier route's pattern also matches is left out (the router's loop decides it)."""
    table: dict[str, tuple[Route, ...]] = {}
    shadowing: list[BaseRoute] = []  # earlier routes that could match more than their own path
    for route in routes:
        if isinstance(route, WebSocketRoute):
            continue  # never matches an HTTP request
        if isinstance(route, Route) and not route.param_convertors:
            path = route.path
            if not any(_may_match(other, path) for other in shadowing):
                table[path] = (*table.get(path, ()), route)
            continue
        shadowing.append(route)
    return table


def _may_match(route: BaseRoute, path: str) -> bool:
    regex = getattr(route, "path_regex", None)
    return regex is None or regex.match(path) is not None  # unknown kinds: assume it may


class ExactRouter(Router):
    """A `Router` whose parameterless routes are found by path (module docstring)."""

    _table: dict[str, tuple[Route, ...]] = {}
    _table_of = -1  # the routes' count the table was built from (routes added later: rebuilt)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._table_of != len(self.routes):
                self._table, self._table_of = exact_table(self.routes), len(self.routes)
            for route in self._table.get(get_route_path(scope), ()):
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    if "router" not in scope:
                        scope["router"] = self
                    scope["route"] = route
                    scope.update(child_scope)
                    await route.handle(scope, receive, send)
                    return
        await super().app(scope, receive, send)
