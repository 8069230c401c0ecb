"""The dialects' routes, built from the registry (`dialects/registry.py`): for each registration,
its chat routes (one turn runner each, with the registration's hooks), the WebSocket app its chat
routes also answer on, and its other routes. Nothing here names a dialect."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp

from sluicegate.core.errors import ConfigError
from sluicegate.dialects.base import DialectContext, Registration
from sluicegate.dialects.registry import DialectTable, resolve
from sluicegate.turn.runner import NO_HOOKS, TurnEndpoint, TurnHooks


@dataclass(slots=True)
class DialectRoutes:
    turns: dict[str, TurnEndpoint] = field(default_factory=dict)  # chat path → its turn runner
    routes: list[BaseRoute] = field(default_factory=list)  # the chat routes first, then the others


def dialect_routes(table: DialectTable, context: DialectContext) -> DialectRoutes:
    """Every registered dialect's routes; two dialects claiming one chat path is a config error."""
    served = DialectRoutes()
    for name, registration in table.registrations.items():
        hooks = _hooks(name, registration)
        websocket = _websocket(name, registration)
        for dialect in registration.build(context):
            if dialect.spec not in registration.specs:  # its errors must be the table's
                raise ConfigError(
                    f"dialect {name!r}: {dialect.path} has a spec its registration does not list"
                )
            turn = TurnEndpoint(dialect, hooks)
            for path in (dialect.path, *dialect.also):
                if path in served.turns:
                    raise ConfigError(f"dialect {name!r}: {path} is another dialect's chat route")
                served.turns[path] = turn
                served.routes.append(Route(path, turn, methods=["POST"]))
            if websocket is not None:
                served.routes.append(WebSocketRoute(dialect.path, websocket(turn)))
        for value in registration.routes:
            routes = resolve(name, value)
            if not isinstance(routes, list | tuple) or not all(isinstance(r, BaseRoute) for r in routes):
                raise ConfigError(f"dialect {name!r}: {value} is not a list of routes")
            served.routes.extend(routes)
    return served


def _hooks(name: str, registration: Registration) -> TurnHooks:
    if registration.hooks is None:
        return NO_HOOKS
    hooks = resolve(name, registration.hooks)
    if not isinstance(hooks, TurnHooks):
        raise ConfigError(f"dialect {name!r}: {registration.hooks} is not a TurnHooks")
    return hooks


def _websocket(name: str, registration: Registration) -> Callable[[TurnEndpoint], ASGIApp] | None:
    if registration.websocket is None:
        return None
    app: Any = resolve(name, registration.websocket)
    if not callable(app):
        raise ConfigError(f"dialect {name!r}: {registration.websocket} is not callable")
    factory: Callable[[TurnEndpoint], ASGIApp] = app
    return factory
