"""POST /v1/messages/count_tokens: the prompt's tokens as `routes/input_tokens.py` counts them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.sealing import load_key
from sluicegate.dialects.anthropic.encoder import anthropic_error
from sluicegate.dialects.anthropic.request import parse_messages_request
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.input_tokens import prompt_tokens


@cache
def _signer(data_dir: Path) -> ThinkingSigner:
    """Thinking sent back counts only when the model would see it (ours, or unsigned)."""
    return ThinkingSigner(load_key(data_dir))


@dialect_endpoint("anthropic", anthropic_error)
async def count_tokens(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, _ = parse_messages_request(body, _signer(state.settings.data_dir), counting=True)
    return JSONResponse({"input_tokens": await prompt_tokens(state, chat)})
