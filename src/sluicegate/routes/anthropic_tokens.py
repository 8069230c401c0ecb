"""POST /v1/messages/count_tokens: the prompt's tokens by the model's own tokenizer where the
engine has one at hand (llama.cpp once loaded, scripted), else a stated estimate."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.dialects.anthropic import anthropic_error, count_tokens_body
from sluicegate.dialects.anthropic_request import parse_messages_request
from sluicegate.dialects.anthropic_signature import ThinkingSigner
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.server_secret import server_secret


@dialect_endpoint("anthropic", anthropic_error)
async def count_tokens(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    signer = ThinkingSigner(server_secret(state.settings.data_dir))
    chat, _ = parse_messages_request(body, signer, counting=True)
    model = state.registry.get(chat.model)
    engines = [instance.engine for instance in model.loaded_instances()] or [model.engine]
    return JSONResponse(count_tokens_body(chat, engines[0].count_tokens(chat)))
