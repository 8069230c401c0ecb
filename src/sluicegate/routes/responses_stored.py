"""Stored responses: retrieve (and resume a background stream), delete, cancel, input items.

A response being generated is a live turn (`turn/live.py`); once it ends it is a store record.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.errors import invalid
from sluicegate.core.validation import INT64_MAX, query_int
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses_request import not_found
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint
from sluicegate.transport.replay import replay
from sluicegate.transport.sse import stream_sse
from sluicegate.turn.live import BackgroundRun
from sluicegate.turn.state import AppState

Json = dict[str, Any]
endpoint = dialect_endpoint("responses", openai_error)


async def _stored(state: AppState, response_id: str) -> Json:
    live = state.live.get(response_id)
    if live is not None:
        return live.snapshot()
    record = await state.store.get(response_id)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    return record.response


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
        )


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
    live = state.live.get(response_id)
    if live is not None:
        if not isinstance(live, BackgroundRun):
            raise invalid("Only background responses can be streamed again.", "stream")
        return _SSEReplay(request, live.log.follow(after), headers)
    record = await state.store.get(response_id)
    if record is None:
        raise not_found("Response", response_id, "response_id")
    if not record.events:
        raise invalid("Only background responses can be streamed again.", "stream")
    return _SSEReplay(request, replay(record.events, after), headers)


@endpoint
async def delete_response(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    live = state.live.get(response_id)
    if live is not None:
        live.cancel("deleted")
        await live.wait()
    if not await state.store.delete(response_id) and live is None:
        raise not_found("Response", response_id, "response_id")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@endpoint
async def cancel_response(request: Request) -> Response:
    state = app_state(request)
    response_id = request.path_params["response_id"]
    live = state.live.get(response_id)
    if live is None:
        stored = await _stored(state, response_id)
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
    record = await state.store.get(response_id)
    live = state.live.get(response_id)
    if record is not None:
        items = record.input_items
    elif live is not None:
        items = live.input_items
    else:
        raise not_found("Response", response_id, "response_id")
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
