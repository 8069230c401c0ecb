"""A chat route's own steps around its turns (`TurnHooks`), apart from the runner: a dialect's
hooks subclass it in Python, and the runner is compiled (a Python class cannot subclass a
compiled one, docs/compiled.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluicegate.dialects.base import Dialect
    from sluicegate.turn.runner import TurnSource
    from sluicegate.turn.state import AppState

Json = dict[str, Any]


class TurnHooks:
    """A chat route's own steps around its turns, for a dialect whose chat route also answers
    what is no turn (Ollama's load and unload). A dialect's registration names them; both do
    nothing by default."""

    async def answer_without_turn(self, dialect: Dialect, state: AppState, source: TurnSource) -> Json | None:
        """The answer to a request on the chat route that is no turn, or None to run the turn."""
        return None

    def after_turn(
        self, dialect: Dialect, state: AppState, source: TurnSource
    ) -> Callable[[], Awaitable[None]] | None:
        """What to do once this request's turn has answered with 200 and released all it held,
        decided before the turn runs (the request's body is not kept for a stream's life)."""
        return None


NO_HOOKS = TurnHooks()
