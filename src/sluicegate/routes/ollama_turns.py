"""Ollama's `/api/chat` and `/api/generate`: the turn runner, plus what is no turn there — an
empty `messages` (chat) or `prompt` (generate) loads the model, and with `keep_alive: 0`
unloads it; either answers one object with `done_reason` "load" or "unload". A turn with
`keep_alive: 0` unloads the model once it has answered, as Ollama does. Both are `TurnHooks`
the runner calls (`HOOKS`, named by `dialects/ollama/registration.py`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sluicegate.core.validation import Fields
from sluicegate.dialects.base import Dialect
from sluicegate.dialects.ollama.dialect import resolve_model
from sluicegate.dialects.ollama.encoder import now_iso
from sluicegate.dialects.ollama.request import FOREVER, keep_alive_seconds
from sluicegate.turn.runner import TurnHooks, TurnSource
from sluicegate.turn.state import AppState

log = logging.getLogger(__name__)
Json = dict[str, Any]


def _empty(body: Any, generate: bool) -> bool:
    if not isinstance(body, dict):
        return False
    if generate:
        return not body.get("prompt") and not body.get("images") and not body.get("suffix")
    return not body.get("messages")


class OllamaTurnHooks(TurnHooks):
    """The hooks both Ollama chat routes run with (its registration names `HOOKS`)."""

    def after_turn(
        self, dialect: Dialect, state: AppState, source: TurnSource
    ) -> Callable[[], Awaitable[None]] | None:
        body = source.body
        if not isinstance(body, dict) or body.get("keep_alive") not in (0, "0", "0s"):
            return None
        name = str(body.get("model"))

        async def unload() -> None:  # `keep_alive: 0`: unloaded once the turn has answered
            model = state.registry.models.get(resolve_model(name, state.registry.models))
            if model is not None and not model.busy:
                await model.unload()

        return unload

    async def answer_without_turn(self, dialect: Dialect, state: AppState, source: TurnSource) -> Json | None:
        generate = dialect.path == "/api/generate"
        if not _empty(source.body, generate):
            return None
        f = Fields(source.body)
        name = f.string("model", required=True) or ""
        keep_alive = keep_alive_seconds(f)
        model = state.registry.models[resolve_model(name, state.registry.models)]
        if keep_alive == 0:
            await model.unload()
            reason = "unload"
        else:
            ttl = keep_alive if keep_alive is not None else (state.settings.jit_ttl_seconds or None)
            await model.load(ttl=None if ttl == FOREVER else ttl)
            reason = "load"
        body: Json = {"model": name, "created_at": now_iso()}
        if generate:
            body["response"] = ""
        else:
            body["message"] = {"role": "assistant", "content": ""}
        return body | {"done": True, "done_reason": reason}


HOOKS = OllamaTurnHooks()
