"""LM Studio REST v1: POST /api/v1/chat (streaming and not), stored chats shared with /v1/responses."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.events import Event
from sluicegate.core.ids import new_id
from sluicegate.core.pipeline import canonical_events, collect, encoded_frames, unless_disconnected
from sluicegate.core.request import ChatRequest
from sluicegate.dialects.lmstudio import LMStudioEncoder, ToolProviders, Vocabulary, lmstudio_error, no_tools
from sluicegate.dialects.lmstudio_request import LMStudioChatRequest, parse_lmstudio_chat, tool_selection
from sluicegate.dialects.responses import ResponseState, items_output, usage_object
from sluicegate.dialects.responses_items import items_to_messages
from sluicegate.dialects.responses_request import ResponsesRequest
from sluicegate.engines.registry import Model
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
from sluicegate.routes.responses_runs import Conversation, stored_turn
from sluicegate.routes.server_tools import closing, open_generation, request_toolset
from sluicegate.tools.catalog import ToolSet
from sluicegate.transport.sse import EventStreamResponse

log = logging.getLogger(__name__)
Json = dict[str, Any]
endpoint = dialect_endpoint("lmstudio", lmstudio_error)
VOCABULARY_HEADER = "x-sluicegate-events"


def check_reasoning(model: Model, setting: str | None) -> None:
    if setting is None:
        return
    caps = model.engine.info().capabilities
    allowed = caps.reasoning_options if caps.reasoning else []
    if setting not in allowed:
        supported = ", ".join(f"'{o}'" for o in allowed) or "none (this model does not reason)"
        raise invalid(
            f"Reasoning setting '{setting}' is not supported by model '{model.id}'. Supported settings: {supported}",
            "reasoning",
            code="invalid_value",
        )


def check_context_length(model: Model, context_length: int | None) -> None:
    maximum = model.engine.info().context_length
    if context_length is not None and maximum is not None and context_length > maximum:
        raise invalid(
            f"context_length {context_length} is above the maximum of model '{model.id}' ({maximum}).",
            "context_length",
            code="invalid_value",
        )


def vocabulary(request: Request, default: str) -> Vocabulary:
    chosen = request.query_params.get("events") or request.headers.get(VOCABULARY_HEADER) or default
    if chosen not in ("current", "v0"):
        raise invalid(f"Unknown event vocabulary '{chosen}'; use 'current' or 'v0'.", "events")
    return "v0" if chosen == "v0" else "current"


async def _conversation(state: AppState, req: LMStudioChatRequest) -> Conversation:
    history: list[Json] = []
    if req.previous_response_id:
        previous = await state.store.get(req.previous_response_id)
        if previous is None:
            raise SluicegateError(
                ErrorKind.NOT_FOUND,
                f"Could not find stored response for previous_response_id '{req.previous_response_id}'. "
                "It may never have existed, have been stored with store=false, been deleted, or expired "
                f"(responses are kept {state.settings.responses_retention_days:g} days).",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = previous.conversation
    items: list[Json] = []
    if req.system_prompt is not None:
        # A system prompt sent again on a continued chat replaces the earlier one (LM Studio 500s
        # here), in its place at the start: chat templates refuse a system message mid-chat.
        system = _message("system", [{"type": "input_text", "text": req.system_prompt}])
        history = [
            system,
            *(
                i
                for i in history
                if not (i.get("type") == "message" and i.get("role") in ("system", "developer"))
            ),
        ]
        items.append(system)
    user = _message("user", req.input_parts)
    items.append(user)
    return Conversation(input_items=items, history=[*history, user])


def _message(role: str, content: list[Json]) -> Json:
    return {"type": "message", "id": new_id("msg_"), "role": role, "content": content, "status": "completed"}


async def _persist(
    state: AppState, response_id: str, req: LMStudioChatRequest, conversation: Conversation, acc: Accumulator
) -> None:
    """Store the turn in the Responses shape, so either dialect can continue it."""
    result = acc.result
    echo = ResponsesRequest(model=req.model, input_items=conversation.input_items)
    echo.previous_response_id = req.previous_response_id
    response_state = ResponseState(response_id, echo, usage=usage_object(acc.usage_so_far()))
    response_state.status = "failed" if result.error else "completed" if result.finish_reason else "cancelled"
    if response_state.status == "cancelled":
        response_state.incomplete_details = {"reason": "client_disconnected"}
    if result.error:
        response_state.error = {"code": "server_error", "message": result.error.message}
    response = response_state.object(items_output(acc.snapshot()))
    record = stored_turn(response, conversation, state.settings.responses_retention_days * 86400)
    try:
        await state.store.put(record)
    except Exception:
        log.exception("storing chat %s failed", response_id)


@endpoint
async def lmstudio_chat(request: Request) -> Response:
    state = app_state(request)
    req = parse_lmstudio_chat(await read_json(request, state.settings.max_body_bytes))
    events_vocabulary = vocabulary(request, state.settings.lmstudio_events)
    model = state.registry.get(req.model)
    check_reasoning(model, req.reasoning)
    check_context_length(model, req.context_length)
    conversation = await _conversation(state, req)
    chat = ChatRequest(
        model=req.model,
        messages=items_to_messages(conversation.history, None),
        sampling=req.sampling,
        reasoning_effort=req.reasoning,
    )
    if req.context_length is not None:
        chat.extra["context_length"] = req.context_length
    if req.context_overflow is not None:
        chat.extra["context_overflow"] = req.context_overflow
    toolset: ToolSet | None = None
    release = state.admission.take()
    streaming = False
    try:
        if req.integrations:
            selection = tool_selection(req.integrations)
            toolset = await request_toolset(state.tools, selection, param="integrations")
        generation = open_generation(chat, model, toolset, state.tools)
        opened = await engine_answer(request, model, generation.events, state.limits, stream=req.stream)
        response_id = new_id("resp_") if req.store else None
        accumulator = Accumulator()
        encoder = LMStudioEncoder(
            generation.instance_id,
            accumulator,
            response_id=response_id,
            vocabulary=events_vocabulary,
            providers=_providers(toolset),
        )
        events = canonical_events(opened.events, state.limits)
        headers = {INSTANCE_HEADER: generation.instance_id, **opened.headers, **chat.response_headers}
        if response_id:
            headers["X-Request-ID"] = response_id

        async def persist() -> None:
            if response_id is not None:
                await _persist(state, response_id, req, conversation, accumulator)

        if req.stream:
            streaming = True
            return EventStreamResponse(
                _frames(events, encoder, accumulator, persist),
                heartbeat_seconds=state.limits.heartbeat_seconds,
                headers=headers,
                on_close=closing(release, toolset),
            )
        try:
            result = await unless_disconnected(
                collect(events, accumulator), lambda: wait_for_disconnect(request)
            )
        finally:
            await asyncio.shield(persist())
        if result.error is not None:
            return error_response(result.error, lmstudio_error, headers)
        return JSONResponse(encoder.body(), headers=headers)
    finally:
        if not streaming:
            release()
            if toolset is not None:
                await toolset.aclose()


def _providers(toolset: ToolSet | None) -> ToolProviders:
    """LM Studio's `provider_info` of each tool the request offers."""
    if toolset is None:
        return no_tools

    def provider_info(name: str) -> Json | None:
        info = toolset.provider(name)
        return info.lmstudio() if info is not None else None

    return provider_info


async def _frames(
    events: AsyncIterator[Event], encoder: LMStudioEncoder, accumulator: Accumulator, persist: Any
) -> AsyncIterator[bytes]:
    yield encoder.start()
    try:
        async for frame in encoded_frames(events, encoder.encode, accumulator):
            yield frame
    finally:
        await asyncio.shield(persist())  # also when the client left: keep what was generated
