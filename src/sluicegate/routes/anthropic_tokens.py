"""POST /v1/messages/count_tokens: the prompt's tokens by the model's own tokenizer where the
engine has one (llama.cpp, loaded or not; scripted), else a stated estimate. Images count as
the model reads them (a llama.cpp model with a projector: its image tokens)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.checks import off_loop
from sluicegate.core.sealing import load_key
from sluicegate.dialects.anthropic.encoder import anthropic_error, count_tokens_body
from sluicegate.dialects.anthropic.request import parse_messages_request
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.images import load_images


@cache
def _signer(data_dir: Path) -> ThinkingSigner:
    """Thinking sent back counts only when it is ours, as the model would see it."""
    return ThinkingSigner(load_key(data_dir))


@dialect_endpoint("anthropic", anthropic_error)
async def count_tokens(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, _ = parse_messages_request(body, _signer(state.settings.data_dir), counting=True)
    model = state.registry.resolve(chat.model)
    engines = [instance.engine for instance in model.loaded_instances()] or [model.engine]
    engine = engines[0]
    if engine.reads_pixels and engine.info().capabilities.vision:  # its images count as it reads them
        await load_images(chat, state.images)
    # Tokenizing a long prompt (images through a projector) is a heavy check: off the event loop.
    count = (
        await off_loop(lambda: engine.count_tokens(chat))
        if engine.heavy_checks
        else engine.count_tokens(chat)
    )
    return JSONResponse(count_tokens_body(chat, count))
