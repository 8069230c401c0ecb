"""The toy dialect's route besides its chat route, and its chat route's hooks: `{"hush": true}`
is answered without a turn, and a turn with a `note` records it once it has answered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sluicegate.dialects.base import Dialect
from sluicegate.turn.runner import TurnHooks, TurnSource
from sluicegate.turn.state import AppState

NOTES: list[str] = []  # the notes of the turns that answered, in this process


async def ping(request: Request) -> Response:
    return JSONResponse({"pong": True})


class ToyHooks(TurnHooks):
    async def answer_without_turn(
        self, dialect: Dialect, state: AppState, source: TurnSource
    ) -> dict[str, Any] | None:
        return {"hushed": True} if isinstance(source.body, dict) and source.body.get("hush") else None

    def after_turn(
        self, dialect: Dialect, state: AppState, source: TurnSource
    ) -> Callable[[], Awaitable[None]] | None:
        note = source.body.get("note") if isinstance(source.body, dict) else None
        if not isinstance(note, str):
            return None

        async def record() -> None:
            NOTES.append(note)

        return record


ROUTES = [Route("/toy/ping", ping, methods=["GET"])]
HOOKS = ToyHooks()
