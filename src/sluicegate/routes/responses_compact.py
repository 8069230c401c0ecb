"""POST /v1/responses/compact: the model summarizes a conversation into a sealed `compaction`
item (see `dialects/responses_compact.py`). Built on today's Responses route helpers; it moves to
the turn runner with the rest of the orchestration."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.errors import invalid
from sluicegate.core.events import ItemKind
from sluicegate.core.pipeline import canonical_events, collect, unless_disconnected
from sluicegate.core.request import ChatRequest, Message
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses_compact import compact_resource, kept_messages, parse_compact_request
from sluicegate.dialects.responses_items import items_to_messages
from sluicegate.dialects.responses_sealed import COMPACT_PROMPT, compaction_item, expand_sealed
from sluicegate.routes.common import (
    JSONResponse,
    app_state,
    dialect_endpoint,
    error_response,
    read_json,
    wait_for_disconnect,
)
from sluicegate.routes.responses import _resolve_conversation
from sluicegate.routes.responses_sealing import request_scope, sealer


@dialect_endpoint("responses", openai_error)
async def compact_response(request: Request) -> Response:
    state = app_state(request)
    compact = parse_compact_request(await read_json(request, state.settings.max_body_bytes))
    req = compact.request
    model = state.registry.get(req.model)
    conversation = await _resolve_conversation(state, req)
    scope = request_scope(request)
    seal = sealer(state)
    readable = expand_sealed(conversation.history, seal, scope)
    messages = items_to_messages(readable, req.instructions)
    if not messages:
        raise invalid("The input has no messages to compact.", "input")
    messages.append(Message(role="user", content=COMPACT_PROMPT))
    chat = ChatRequest(model=req.model, messages=messages, tool_choice="none", extra=req.extra)
    release = state.admission.take()
    try:
        generation = model.open(chat)
        events = canonical_events(generation.events, state.limits)
        result = await unless_disconnected(collect(events), lambda: wait_for_disconnect(request))
    finally:
        release()
    if result.error is not None:
        return error_response(result.error, openai_error)
    summary = result.text_of(ItemKind.MESSAGE) or ""
    # A compaction replaces the whole window: earlier compactions are folded into the new one.
    kept = kept_messages(conversation.history)
    output = [*kept, compaction_item(summary, seal, scope)]
    return JSONResponse(compact_resource(output, result.usage))
