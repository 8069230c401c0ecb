"""Counting a chat request's prompt without answering it: Anthropic's `count_tokens`, and
llama-server's `POST /v1/chat/completions/input_tokens` (also without `/v1`). The count is the
model's own tokenizer's where the engine has one (llama.cpp, loaded or not; scripted), images
counted as the model reads them (a llama.cpp model with a projector: its image tokens); else an
estimate of one token per four bytes of the prompt's text, tools included."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.checks import off_loop
from sluicegate.core.request import ChatRequest
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.images import load_images
from sluicegate.turn.state import AppState


async def prompt_tokens(state: AppState, chat: ChatRequest) -> int:
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
    return estimate(chat) if count is None else count


def estimate(request: ChatRequest) -> int:
    """An engine without a tokenizer at hand: one token per four bytes, four per message."""
    size = sum(len(m.text.encode()) + len(m.reasoning or "") for m in request.messages)
    size += sum(len(call.arguments) for m in request.messages for call in m.tool_calls)
    size += sum(len(t.name) + len(t.description) + len(orjson.dumps(t.parameters)) for t in request.tools)
    return size // 4 + 4 * len(request.messages)


@dialect_endpoint("chat_completions", openai_error)
async def chat_input_tokens(request: Request) -> Response:
    """llama-server's answer, which is OpenAI's Responses' `input_tokens` object."""
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, _ = parse_chat_request(body, prefill_assistant=state.settings.prefill_assistant)
    count = await prompt_tokens(state, chat)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": count})


CHAT_ROUTES = [
    Route(path, chat_input_tokens, methods=["POST"])
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens")
]
