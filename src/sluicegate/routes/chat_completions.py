"""POST /v1/chat/completions: parse, admit, then stream frames or return the collected body."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.ids import new_id
from sluicegate.core.pipeline import canonical_events, collect, encoded_frames, unless_disconnected
from sluicegate.dialects.chat_completions import (
    ChatCompletionsEncoder,
    ReasoningField,
    completion_body,
)
from sluicegate.dialects.chat_completions_request import parse_chat_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.routes.common import (
    INSTANCE_HEADER,
    JSONResponse,
    app_state,
    dialect_endpoint,
    engine_answer,
    error_response,
    read_json,
    wait_for_disconnect,
)
from sluicegate.routes.server_tools import closing, open_generation, request_toolset
from sluicegate.tools.catalog import ToolSelection, ToolSet
from sluicegate.transport.sse import EventStreamResponse


@dialect_endpoint("chat_completions", openai_error)
async def chat_completions(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    chat, options = parse_chat_request(body)
    model = state.registry.get(chat.model)
    release = state.admission.take()
    streaming = False
    toolset: ToolSet | None = None
    try:
        if state.tools.providers:  # configured MCP servers and plugins run server-side
            toolset = await request_toolset(state.tools, ToolSelection(all_configured=True), param="tools")
        generation = open_generation(chat, model, toolset, state.tools)
        opened = await engine_answer(request, model, generation.events, state.limits, stream=options.stream)
        completion_id = new_id("chatcmpl-", 32)
        created = int(time.time())
        headers = {
            "X-Request-ID": completion_id,
            INSTANCE_HEADER: generation.instance_id,
            **opened.headers,
            **chat.response_headers,
        }
        events = canonical_events(opened.events, state.limits)
        reasoning_field: ReasoningField = state.settings.reasoning_field  # type: ignore[assignment]
        if options.stream:
            encoder = ChatCompletionsEncoder(
                completion_id,
                created,
                chat.model,
                include_usage=options.include_usage,
                logprobs=chat.sampling.logprobs,
                reasoning_field=reasoning_field,
            )
            streaming = True
            return EventStreamResponse(
                encoded_frames(events, encoder.encode),
                heartbeat_seconds=state.limits.heartbeat_seconds,
                headers=headers,
                on_close=closing(release, toolset),
            )
        result = await unless_disconnected(collect(events), lambda: wait_for_disconnect(request))
        if result.error is not None:
            return error_response(result.error, openai_error, headers)
        body_out = completion_body(
            result,
            completion_id=completion_id,
            created=created,
            model=chat.model,
            logprobs=chat.sampling.logprobs,
            reasoning_field=reasoning_field,
        )
        return JSONResponse(body_out, headers=headers)
    finally:
        if not streaming:
            release()
            if toolset is not None:
                await toolset.aclose()
