"""The Responses API routes: create, retrieve (and resume a stream), delete, cancel, input items."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.events import RawEvent
from sluicegate.core.ids import new_id
from sluicegate.core.pipeline import canonical_events, unless_disconnected
from sluicegate.core.request import ChatRequest
from sluicegate.core.validation import INT64_MAX, query_int
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses import ResponsesEncoder, ResponseState
from sluicegate.dialects.responses_items import items_to_messages, orphan_call_ids
from sluicegate.dialects.responses_request import ResponsesRequest, not_found, parse_responses_request
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
from sluicegate.routes.responses_runs import Conversation, ResponseRun
from sluicegate.routes.responses_tools import Approvals, ToolRun, resolve_approvals, tool_selection
from sluicegate.routes.server_tools import request_toolset
from sluicegate.tools.catalog import ToolSet
from sluicegate.tools.loop import with_server_tools
from sluicegate.transport.answer import Opened
from sluicegate.transport.replay import replay
from sluicegate.transport.sse import EventStreamResponse

Json = dict[str, Any]
endpoint = dialect_endpoint("responses", openai_error)


async def _resolve_conversation(state: AppState, req: ResponsesRequest) -> Conversation:
    store = state.store
    items: list[Json] = []
    for index, item in enumerate(req.input_items):
        if item["type"] == "item_reference":
            found = await store.find_item(item["id"])
            if found is None:
                raise not_found("Item", item["id"], f"input[{index}].id")
            items.append(found)
        else:
            items.append(item)
    history: list[Json] = []
    if req.previous_response_id:
        live = state.runs.get(req.previous_response_id)
        if live is not None:
            raise invalid(
                f"Previous response '{req.previous_response_id}' is still in progress; wait for it to finish.",
                "previous_response_id",
                code="previous_response_in_progress",
            )
        previous = await store.get(req.previous_response_id)
        if previous is None:
            raise not_found("Previous response", req.previous_response_id, "previous_response_id")
        history = previous.conversation
    return Conversation(input_items=items, history=[*history, *items])


def _chat_request(req: ResponsesRequest, messages: list[Any]) -> ChatRequest:
    fmt = req.text.get("format", {})
    return ChatRequest(
        model=req.model,
        messages=messages,
        tools=req.tool_specs,
        tool_choice=req.canonical_tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        sampling=req.sampling,
        reasoning_effort=(req.reasoning or {}).get("effort"),
        response_format=fmt if fmt.get("type") != "text" else None,
        extra=req.extra,
    )


@endpoint
async def create_response(request: Request) -> Response:
    state = app_state(request)
    req = parse_responses_request(await read_json(request, state.settings.max_body_bytes))
    model = state.registry.get(req.model)
    conversation = await _resolve_conversation(state, req)
    approvals = await resolve_approvals(conversation.history, conversation.input_items, state.store)
    if approvals.fetched:  # requests answered without their history: the model needs them first
        history = conversation.history
        cut = len(history) - len(conversation.input_items)
        conversation.history = [*history[:cut], *approvals.fetched, *history[cut:]]
    known_calls: dict[str, Json] = {}
    for call_id in orphan_call_ids(conversation.history):
        if (call := await state.store.find_call(call_id)) is not None:
            known_calls[call_id] = call
    messages = items_to_messages(conversation.history, req.instructions, known_calls)
    if not messages:
        raise invalid("The input has no messages to respond to.", "input")
    chat = _chat_request(req, messages)
    release = state.admission.take()
    toolset: ToolSet | None = None
    try:
        selection = tool_selection(req, state.tools.plugin_ids())
        toolset = await request_toolset(state.tools, selection, param="tools")
        raw, instance_id = _open(state, req, chat, model, toolset, conversation.history, approvals)
        opened = Opened(raw)
        if not req.background:  # a background response answers at once, whatever the upstream does
            opened = await engine_answer(request, model, raw, state.limits, stream=req.stream)
    except BaseException:
        release()
        if toolset is not None:
            await toolset.aclose()
        raise
    response_id = new_id("resp_")
    accumulator = Accumulator()
    encoder = ResponsesEncoder(
        ResponseState(response_id, req),
        accumulator,
        reasoning_names=state.settings.responses_reasoning_events,
    )
    run = ResponseRun(
        canonical_events(opened.events, state.limits),
        encoder,
        accumulator,
        conversation,
        store=state.store,
        retention_seconds=state.settings.responses_retention_days * 86400,
        runs=state.runs,
        on_end=toolset.aclose,
    )
    run.start()
    assert run.task is not None
    run.task.add_done_callback(lambda _: release())
    headers = {"X-Request-ID": response_id, INSTANCE_HEADER: instance_id, **opened.headers}
    if req.stream:
        return _stream(state, run, -1, headers, cancel_on_disconnect=not req.background)
    if req.background:
        return JSONResponse(run.snapshot(), headers=headers)
    try:
        final = await unless_disconnected(run.wait(), lambda: wait_for_disconnect(request))
    except SluicegateError:
        run.cancel("client_disconnected")
        raise
    if final["status"] == "failed":
        kind = ErrorKind.TIMEOUT if final["error"]["code"] == "request_timeout" else ErrorKind.ENGINE
        info = SluicegateError(kind, final["error"]["message"], code=final["error"]["code"]).info
        return error_response(info, openai_error, headers)
    return JSONResponse(final, headers=headers)


def _open(
    state: AppState,
    req: ResponsesRequest,
    chat: ChatRequest,
    model: Model,
    toolset: ToolSet,
    history: list[Json],
    approvals: Approvals,
) -> tuple[AsyncIterator[RawEvent], str]:
    """The raw events of this response and the instance serving it. Without server tools, the
    engine's own; with them, the tool loop's. The first round is admitted here, so a full queue
    is refused before the response starts, unless approved calls must run before it."""
    if not toolset.listings and not approvals.approved:
        generation = model.open(chat)
        return generation.events, generation.instance_id
    tools = ToolRun(req, chat, toolset, model, state.tools.max_rounds, history, approvals.approved)
    if approvals.approved:
        return tools.events(None), model.instance_id
    first = model.open(with_server_tools(chat, toolset))
    return tools.events(first), first.instance_id


def _stream(
    state: AppState, run: ResponseRun, after: int, headers: dict[str, str], *, cancel_on_disconnect: bool
) -> EventStreamResponse:
    def closed() -> None:
        if cancel_on_disconnect and not run.finished:
            run.cancel("client_disconnected")

    return EventStreamResponse(
        run.log.follow(after),
        heartbeat_seconds=state.limits.heartbeat_seconds,
        headers=headers,
        on_close=closed,
    )


async def _stored(state: AppState, response_id: str) -> Json:
    run = state.runs.get(response_id)
    if run is not None:
        return run.snapshot()
    record = await state.store.get(response_id)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    return record.response


@endpoint
async def retrieve_response(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    if request.query_params.get("stream", "false").lower() != "true":
        return JSONResponse(await _stored(state, response_id))
    after = query_int(
        request.query_params.get("starting_after", "-1"), "starting_after", low=-1, high=INT64_MAX
    )
    headers = {"X-Request-ID": response_id}
    run = state.runs.get(response_id)
    if run is not None:
        if not run.background:
            raise invalid("Only background responses can be streamed again.", "stream")
        return _stream(state, run, after, headers, cancel_on_disconnect=False)
    record = await state.store.get(response_id)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    if not record.events:
        raise invalid("Only background responses can be streamed again.", "stream")
    return EventStreamResponse(
        replay(record.events, after), heartbeat_seconds=state.limits.heartbeat_seconds, headers=headers
    )


@endpoint
async def delete_response(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    run = state.runs.get(response_id)
    if run is not None:
        run.cancel("deleted")
        await run.wait()
    if not await state.store.delete(response_id) and run is None:
        raise not_found("Response", response_id, "response_id")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@endpoint
async def cancel_response(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    run = state.runs.get(response_id)
    if run is None:
        stored = await _stored(state, response_id)
        if not stored.get("background"):
            raise invalid("Only background responses can be cancelled.", "response_id")
        return JSONResponse(stored)  # already finished: nothing left to cancel
    if not run.background:
        raise invalid("Only background responses can be cancelled.", "response_id")
    run.cancel("cancelled")
    return JSONResponse(await run.wait())


@endpoint
async def list_input_items(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    run = state.runs.get(response_id)
    if run is not None:
        items = run.conversation.input_items
    else:
        record = await state.store.get(response_id)
        if record is None:
            raise not_found("Response", response_id, "response_id")
        items = record.input_items
    params = request.query_params
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("Invalid 'order': expected 'asc' or 'desc'.", "order")
    limit = query_int(params.get("limit", "20"), "limit", low=1, high=100)
    ordered = list(reversed(items)) if order == "desc" else list(items)
    if after := params.get("after"):
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise not_found("Item", after, "after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(ordered) > len(page),
        }
    )
