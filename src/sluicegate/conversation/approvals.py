"""MCP approvals across turns: which approval requests a turn's input answers.

An approval response (`mcp_approval_response`) must answer a known approval request — in the history, or found in
the store when the client sent it without `previous_response_id`. An approved request not run
yet (no server call names it) is run at the start of the turn, before the model (`turn/tools.py`);
one that denies becomes a result saying so (`items_to_messages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluicegate.core.errors import invalid
from sluicegate.core.items import (
    ApprovalRequestItem,
    ApprovalResponseItem,
    ConversationItem,
    ServerCallItem,
    item_from_json,
)
from sluicegate.store.base import Store


@dataclass(slots=True)
class Approvals:
    """Approval requests this turn's input approves (to run first), and requests it answers
    that were found in the store rather than the history (the model needs them in front)."""

    approved: list[ApprovalRequestItem] = field(default_factory=list)
    fetched: list[ApprovalRequestItem] = field(default_factory=list)


async def resolve_approvals(
    history: list[ConversationItem], input_items: list[ConversationItem], store: Store, scope: str = ""
) -> Approvals:
    requests = {i.id: i for i in history if isinstance(i, ApprovalRequestItem)}
    done = {i.approval_request_id for i in history if isinstance(i, ServerCallItem)}
    out = Approvals()
    for index, item in enumerate(input_items):
        if not isinstance(item, ApprovalResponseItem):
            continue
        request_id = item.request_id
        request = requests.get(request_id)
        if request is None:
            raw = await store.find_item(request_id, scope=scope)
            found = None if raw is None else item_from_json(raw, store.read_item)
            if not isinstance(found, ApprovalRequestItem):
                raise invalid(
                    f"No MCP approval request with id '{request_id}' was found; pass "
                    "'previous_response_id' of the response that asked for it.",
                    f"input[{index}].approval_request_id",
                    code="approval_request_not_found",
                )
            request = requests[request_id] = found
            out.fetched.append(found)
        if item.approve and request_id not in done:
            done.add(request_id)
            out.approved.append(request)
    return out
