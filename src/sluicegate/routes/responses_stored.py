"""Stored responses: retrieve (and resume a background stream), delete, cancel, input items.

A response being generated here is a live turn (`turn/live.py`); once it ends it is a store
record. A background run is a store record from acceptance, so a run in flight on another
replica is read, followed (`store.follow_events`) and cancelled (`store.request_cancel`) through
the store. Everything is scoped to the requester's API key: another key's id answers 404
exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.errors import invalid
from sluicegate.core.items import items_from_json
from sluicegate.core.validation import INT64_MAX, query_int
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses.conversation import from_items
from sluicegate.dialects.responses.request import not_found
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint
from sluicegate.transport.sse import body_writer, server_send, stream_sse
from sluicegate.turn.http import request_scope
from sluicegate.turn.live import BackgroundRun
from sluicegate.turn.state import AppState

Json = dict[str, Any]
endpoint = dialect_endpoint("responses", openai_error)
REMOTE_POLL_SECONDS = 0.05  # how often a cancel/delete on another replica's run checks it ended
REMOTE_WAIT_SECONDS = 30.0  # and for how long at most (a lost owner's lease expires well before)


def _scope(request: Request, state: AppState) -> str:
    return request_scope(request, state.settings.api_keys)


async def _stored(state: AppState, response_id: str, scope: str) -> Json:
    live = state.live_turn(response_id, scope)
    if live is not None:
        return live.snapshot()
    record = await state.store.get(response_id, scope=scope, events=False)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    return record.response


async def _until_ended(state: AppState, response_id: str, scope: str) -> None:
    """Wait for a run in flight on another replica to end (its owner cancelled it, or its
    lease expired and a sweep failed it): the store has its terminal record then."""
    with contextlib.suppress(TimeoutError):  # bounded: an owner that never answers is a sweep's
        async with asyncio.timeout(REMOTE_WAIT_SECONDS):
            while await state.store.run_in_flight(response_id, scope=scope):
                await asyncio.sleep(REMOTE_POLL_SECONDS)


class _SSEReplay(Response):
    """An SSE response over frames already written (a log followed, or a stored replay)."""

    def __init__(self, request: Request, chunks: Any, headers: dict[str, str]) -> None:
        super().__init__()
        self._request, self._chunks, self._extra_headers = request, chunks, headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        state = app_state(self._request)
        await stream_sse(
            self._chunks,
            send,
            receive,
            heartbeat_seconds=state.limits.heartbeat_seconds,
            buffer_bytes=state.settings.stream_buffer_bytes,
            headers=self._extra_headers,
            body_send=server_send(scope, send),
            writer=body_writer(scope),
        )


@endpoint
async def retrieve_response(request: Request) -> Response:
    state = app_state(request)
    scope = _scope(request, state)
    response_id = request.path_params["response_id"]
    if request.query_params.get("stream", "false").lower() != "true":
        return JSONResponse(await _stored(state, response_id, scope))
    after = query_int(
        request.query_params.get("starting_after", "-1"), "starting_after", low=-1, high=INT64_MAX
    )
    headers = {"X-Request-ID": response_id}
    live = state.live_turn(response_id, scope)
    if live is not None:
        if not isinstance(live, BackgroundRun):
            raise invalid("Only background responses can be streamed again.", "stream")
        return _SSEReplay(request, live.log.follow(after), headers)
    # Finished, or in flight on another replica: its log is in the store either way.
    record = await state.store.get(response_id, scope=scope, events=False)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    if not record.response.get("background"):
        raise invalid("Only background responses can be streamed again.", "stream")
    return _SSEReplay(request, state.store.follow_events(response_id, after, scope=scope), headers)


@endpoint
async def delete_response(request: Request) -> Response:
    state = app_state(request)
    scope = _scope(request, state)
    response_id = request.path_params["response_id"]
    live = state.live_turn(response_id, scope)
    if live is not None:
        live.cancel("deleted")
        await live.wait()
    elif await state.store.request_cancel(response_id, scope=scope):
        await _until_ended(state, response_id, scope)  # else its owner would store it again
    if not await state.store.delete(response_id, scope=scope) and live is None:
        raise not_found("Response", response_id, "response_id")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@endpoint
async def cancel_response(request: Request) -> Response:
    state = app_state(request)
    scope = _scope(request, state)
    response_id = request.path_params["response_id"]
    live = state.live_turn(response_id, scope)
    if live is None:
        if await state.store.request_cancel(response_id, scope=scope):  # another replica's run
            await _until_ended(state, response_id, scope)
        stored = await _stored(state, response_id, scope)
        if not stored.get("background"):
            raise invalid("Only background responses can be cancelled.", "response_id")
        return JSONResponse(stored)  # already finished: nothing left to cancel
    if not live.background:
        raise invalid("Only background responses can be cancelled.", "response_id")
    live.cancel("cancelled")
    return JSONResponse(await live.wait())


@endpoint
async def list_input_items(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    scope = _scope(request, state)
    items = await state.store.input_items(response_id, scope=scope)
    if items is None:
        live = state.live_turn(response_id, scope)  # a foreground turn is stored when it ends
        if live is None:
            raise not_found("Response", response_id, "response_id")
        items = live.input_items
    items = from_items(items_from_json(items, state.store.read_item))  # stored items, as Responses lists them
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
