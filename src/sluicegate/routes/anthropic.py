"""POST /v1/messages and /v1/messages/count_tokens: parse, admit, then stream frames or return
the collected body. Orchestration only, as `routes/chat_completions.py`; the translation is in
`dialects/anthropic*.py`."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.events import Event
from sluicegate.core.frames import Frame
from sluicegate.core.ids import new_id
from sluicegate.core.pipeline import canonical_events, collect, encoded_frames, unless_disconnected
from sluicegate.dialects.anthropic import (
    PING,
    AnthropicEncoder,
    anthropic_error,
    anthropic_status,
    count_tokens_body,
    message_body,
)
from sluicegate.dialects.anthropic_request import clamp_max_tokens, parse_messages_request
from sluicegate.dialects.anthropic_signature import ThinkingSigner
from sluicegate.routes.common import (
    INSTANCE_HEADER,
    AppState,
    JSONResponse,
    app_state,
    dialect_endpoint,
    engine_answer,
    error_response,
    read_json,
    wait_for_disconnect,
)
from sluicegate.routes.server_tools import closing, open_generation, request_toolset
from sluicegate.server_secret import server_secret
from sluicegate.tools.catalog import ToolSelection, ToolSet
from sluicegate.transport.sse import EventStreamResponse, sse_frame


def _signer(state: AppState) -> ThinkingSigner:
    return ThinkingSigner(server_secret(state.settings.data_dir))


def _as_bytes(encode: Callable[[Event], list[Frame]]) -> Callable[[Event], bytes]:
    """Until the transport writes frame objects itself (issue 11)."""
    return lambda event: b"".join(sse_frame(frame.data, frame.event) for frame in encode(event))


@dialect_endpoint("anthropic", anthropic_error, anthropic_status)
async def create_message(request: Request) -> Response:
    state = app_state(request)
    signer = _signer(state)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, options = parse_messages_request(body, signer, betas=request.headers.get("anthropic-beta"))
    model = state.registry.get(chat.model)
    clamp_max_tokens(chat, model.engine.info().context_length)
    release = state.admission.take()
    streaming = False
    toolset: ToolSet | None = None
    try:
        if state.tools.providers:  # configured MCP servers and plugins run server-side
            toolset = await request_toolset(state.tools, ToolSelection(all_configured=True), param="tools")
        generation = open_generation(chat, model, toolset, state.tools)
        opened = await engine_answer(request, model, generation.events, state.limits, stream=options.stream)
        message_id = new_id("msg_", 32)
        headers = {"request-id": message_id, INSTANCE_HEADER: generation.instance_id, **opened.headers}
        events = canonical_events(opened.events, state.limits)
        if options.stream:
            encoder = AnthropicEncoder(message_id, chat.model, signer, omit_thinking=options.omit_thinking)
            streaming = True
            return EventStreamResponse(
                encoded_frames(events, _as_bytes(encoder.encode)),
                heartbeat_seconds=state.limits.heartbeat_seconds,
                headers=headers,
                on_close=closing(release, toolset),
                heartbeat=sse_frame(PING.data, PING.event),
            )
        result = await unless_disconnected(collect(events), lambda: wait_for_disconnect(request))
        if result.error is not None:
            return error_response(result.error, anthropic_error, headers, status=anthropic_status)
        out = message_body(
            result,
            message_id=message_id,
            model=chat.model,
            signer=signer,
            omit_thinking=options.omit_thinking,
        )
        return JSONResponse(out, headers=headers)
    finally:
        if not streaming:
            release()
            if toolset is not None:
                await toolset.aclose()


@dialect_endpoint("anthropic", anthropic_error, anthropic_status)
async def count_tokens(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, _ = parse_messages_request(body, _signer(state), counting=True)
    model = state.registry.get(chat.model)
    engines = [instance.engine for instance in model.loaded_instances()] or [model.engine]
    return JSONResponse(count_tokens_body(chat, engines[0].count_tokens(chat)))
