"""The response object of a stored turn whose dialect has none of its own (LM Studio chats).

A record keeps the response as its client saw it (what `GET /v1/responses/{id}` answers) beside
the conversation in our own items (`conversation/record.py`). A dialect whose encoder produces a
response object (Responses) stores exactly that; any other gets one built here from the
accumulator, so `GET /v1/responses/{id}` can read every stored turn.
"""

from __future__ import annotations

import time
from typing import Any

from sluicegate.conversation.resolve import Resolved
from sluicegate.core.accumulate import Accumulator
from sluicegate.dialects.responses.conversation import from_items
from sluicegate.dialects.responses.encoder import (
    RESPONSE_ERROR_CODE,
    ResponseState,
    items_output,
    usage_object,
)
from sluicegate.dialects.responses.request import ResponsesRequest

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
    echo = ResponsesRequest(model=model, input_items=from_items(resolved.input_items))
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
