"""POST /v1/responses/compact: the model summarizes a conversation into a sealed `compaction`
item (see `dialects/responses_compact.py`).

Not a turn (no stream, no tools, nothing stored): the conversation is resolved as every turn's
is, then one non-streaming generation runs with its admission place and generation owned by one
`Owned`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.conversation.resolve import resolve
from sluicegate.core.events import ItemKind
from sluicegate.core.owned import Owned
from sluicegate.core.pipeline import canonical_events, collect, unless_disconnected
from sluicegate.core.request import ChatRequest, Message, RequestOptions
from sluicegate.dialects.base import ConversationInput
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses.compact import compact_resource, kept_messages, parse_compact_request
from sluicegate.dialects.responses.conversation import from_items, to_items
from sluicegate.dialects.responses.sealed import COMPACT_PROMPT, compaction_item
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, error_response, read_json
from sluicegate.turn.http import request_scope, wait_for_disconnect


@dialect_endpoint("responses", openai_error)
async def compact_response(request: Request) -> Response:
    state = app_state(request)
    compact = parse_compact_request(await read_json(request, state.settings.max_body_bytes))
    req = compact.request
    model = state.registry.resolve(req.model)
    scope = request_scope(request, state.settings.api_keys)
    conversation = ConversationInput(
        input_items=to_items(req.input_items),
        previous_response_id=req.previous_response_id,
        instructions=req.instructions,
    )
    resolved = await resolve(
        state.store,
        conversation,
        lambda i: state.live_turn(i, scope) is not None,
        sealer=state.sealer,
        scope=scope,
    )
    messages = [*resolved.messages, Message(role="user", content=COMPACT_PROMPT)]
    chat = ChatRequest(
        model=req.model, messages=messages, tool_choice="none", options=RequestOptions(ttl=req.ttl)
    )
    async with Owned() as owned:
        owned.callback(state.admission.take())
        generation = await model.admit(chat)
        owned.push_async_callback(generation.aclose)
        events = canonical_events(generation.events, state.limits)
        result = await unless_disconnected(collect(events), lambda: wait_for_disconnect(request))
    if result.error is not None:
        return error_response(result.error, openai_error)
    summary = result.text_of(ItemKind.MESSAGE) or ""
    # A compaction replaces the whole window: earlier compactions are folded into the new one.
    assert state.sealer is not None
    output = [*kept_messages(from_items(resolved.history)), compaction_item(summary, state.sealer, scope)]
    return JSONResponse(compact_resource(output, result.usage))
