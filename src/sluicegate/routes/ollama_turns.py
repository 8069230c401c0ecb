"""Ollama's `/api/chat` and `/api/generate`: the turn runner, plus what is no turn there — an
empty `messages` (chat) or `prompt` (generate) loads the model, and with `keep_alive: 0`
unloads it; either answers one object with `done_reason` "load" or "unload". A turn with
`keep_alive: 0` unloads the model once it has answered, as Ollama does."""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from starlette.requests import Request

from sluicegate.core.validation import Fields
from sluicegate.dialects.ollama.dialect import resolve_model
from sluicegate.dialects.ollama.encoder import now_iso
from sluicegate.dialects.ollama.request import FOREVER, keep_alive_seconds
from sluicegate.turn.runner import TurnEndpoint, TurnSource
from sluicegate.turn.state import AppState

log = logging.getLogger(__name__)
Json = dict[str, Any]
# The model a turn asked to unload after answering (`keep_alive: 0`), for this request's task.
_UNLOAD_AFTER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ollama_unload_after", default=None
)


def _empty(body: Any, generate: bool) -> bool:
    if not isinstance(body, dict):
        return False
    if generate:
        return not body.get("prompt") and not body.get("images") and not body.get("suffix")
    return not body.get("messages")


class OllamaTurnEndpoint(TurnEndpoint):
    async def _serve(self, state: AppState, request: Request, send: Any) -> int:
        token = _UNLOAD_AFTER.set(None)
        try:
            status = await super()._serve(state, request, send)
            name = _UNLOAD_AFTER.get()
            if name is not None and status == 200:
                model = state.registry.models.get(resolve_model(name, state.registry.models))
                if model is not None and not model.busy:
                    await model.unload()
            return status
        finally:
            _UNLOAD_AFTER.reset(token)

    async def answer_without_turn(self, state: AppState, source: TurnSource) -> Json | None:
        generate = self.dialect.path == "/api/generate"
        if not _empty(source.body, generate):
            if isinstance(source.body, dict) and source.body.get("keep_alive") in (0, "0", "0s"):
                _UNLOAD_AFTER.set(str(source.body.get("model")))
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
