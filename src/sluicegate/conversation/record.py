"""A finished (or cut-off) turn as a store record, whichever dialect produced it.

Records are kept in the Responses shape. A dialect whose encoder produces a response object
(Responses) stores exactly what its client saw; any other (LM Studio chats) gets one built here
from the accumulator, so either dialect can continue the conversation and `GET /v1/responses/{id}`
can read it.
"""

from __future__ import annotations

import time
from typing import Any

from sluicegate.conversation.resolve import Resolved
from sluicegate.core.accumulate import Accumulator
from sluicegate.dialects.responses.encoder import (
    RESPONSE_ERROR_CODE,
    ResponseState,
    items_output,
    usage_object,
)
from sluicegate.dialects.responses.request import ResponsesRequest
from sluicegate.store.base import StoredResponse

Json = dict[str, Any]


def built_response(
    turn_id: str,
    model: str,
    resolved: Resolved,
    previous_response_id: str | None,
    accumulator: Accumulator,
    *,
    cancel_reason: str | None,
) -> Json:
    """A Responses-shaped object for a turn whose dialect has none of its own."""
    result = accumulator.result
    echo = ResponsesRequest(model=model, input_items=resolved.input_items)
    echo.previous_response_id = previous_response_id
    state = ResponseState(turn_id, echo, usage=usage_object(accumulator.usage_so_far()))
    if result.error is not None:
        state.status = "failed"
        state.error = {
            "code": result.error.code or RESPONSE_ERROR_CODE.get(result.error.kind, "server_error"),
            "message": result.error.message,
        }
    elif result.finish_reason is not None and cancel_reason is None:
        state.status = "completed"
        state.completed_at = int(time.time())
    else:
        state.status = "cancelled"
        state.incomplete_details = {"reason": cancel_reason or "client_disconnected"}
    return state.object(items_output(accumulator.snapshot()))


def stored_turn(
    response: Json, resolved: Resolved, retention_seconds: float, events: list[bytes] | None = None
) -> StoredResponse:
    now = time.time()
    return StoredResponse(
        id=response["id"],
        response=response,
        input_items=resolved.input_items,
        conversation=[*resolved.history, *response["output"]],
        created_at=now,
        expires_at=now + retention_seconds,
        events=events or [],
    )
