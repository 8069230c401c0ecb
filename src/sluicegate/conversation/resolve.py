"""A turn's input resolved against the store: history, input items, messages, approvals.

- `item_reference` items are replaced by the stored item they name;
- `previous_response_id` brings the stored conversation (a response still running is refused);
- a system item that replaces the stored one (LM Studio) takes its place at the start;
- `mcp_approval_response` items must answer a known approval request (`approvals.py`);
- `previous_response_id` is looked up in the transport's own conversations first (`local`: a
  WebSocket's `store: false` turns);
- tool results whose call is nowhere in the history get the stored call (by call_id); with
  `strict_calls`, a result answering no known call is a 400 rather than getting a synthesised call;
- every lookup is scoped: another API key's response, item or call is "not found", exactly
  like a missing one, so its text never reaches this key's prompt;
- sealed items (compactions, encrypted reasoning) are opened for the model, in every dialect,
  with the requester's scope: another key's blob is a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluicegate.conversation.approvals import resolve_approvals
from sluicegate.conversation.messages import items_to_messages, orphan_call_ids
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.request import Message
from sluicegate.core.sealing import Sealer
from sluicegate.dialects.base import ConversationInput
from sluicegate.dialects.responses.sealed import expand_sealed
from sluicegate.store.base import Store

Json = dict[str, Any]


@dataclass(slots=True)
class Resolved:
    input_items: list[Json]  # this request's own input items (for the input_items listing)
    history: list[Json]  # everything before this turn's output, resolved
    messages: list[Message] = field(default_factory=list)
    approved: list[Json] = field(default_factory=list)  # approval requests to run first


def _not_found(what: str, ident: str, param: str) -> SluicegateError:
    return SluicegateError(
        ErrorKind.NOT_FOUND, f"{what} with id '{ident}' not found.", param=param, code="not_found"
    )


async def resolve(
    store: Store,
    conv: ConversationInput,
    running: Callable[[str], bool],
    *,
    sealer: Sealer | None = None,
    scope: str = "",
) -> Resolved:
    """Resolve `conv` within `scope` (the requester's: another key's ids are not found);
    `running(id)` tells whether a response is still being generated here (a run in flight on
    another replica is asked of the store)."""
    items: list[Json] = []
    for index, item in enumerate(conv.input_items):
        if item.get("type") == "item_reference":
            found = await store.find_item(item["id"], scope=scope)
            if found is None:
                raise _not_found("Item", item["id"], f"input[{index}].id")
            items.append(found)
        else:
            items.append(item)
    history: list[Json] = []
    if conv.previous_response_id:
        previous_id = conv.previous_response_id
        if running(previous_id) or await store.run_in_flight(previous_id, scope=scope):
            raise invalid(
                f"Previous response '{previous_id}' is still in progress; wait for it to finish.",
                "previous_response_id",
                code="previous_response_in_progress",
            )
        local = conv.local(previous_id) if conv.local is not None else None
        if local is not None:
            history = local
        else:
            previous = await store.get(previous_id, scope=scope, events=False)
            if previous is None:
                if conv.previous_not_found is not None:
                    raise conv.previous_not_found(previous_id)
                raise _not_found("Previous response", previous_id, "previous_response_id")
            history = previous.conversation
    if conv.replace_system and any(_is_system(i) for i in items):
        # A system prompt sent again replaces the earlier one, in its place at the start: chat
        # templates refuse a system message mid-chat.
        systems = [i for i in items if _is_system(i)]
        rest = [i for i in items if not _is_system(i)]
        history = [*systems, *(i for i in history if not _is_system(i))]
        resolved = Resolved(input_items=items, history=[*history, *rest])
    else:
        resolved = Resolved(input_items=items, history=[*history, *items])
    approvals = await resolve_approvals(resolved.history, items, store, scope)
    if approvals.fetched:  # requests answered without their history: the model needs them first
        cut = len(resolved.history) - len(items)
        resolved.history = [*resolved.history[:cut], *approvals.fetched, *resolved.history[cut:]]
    resolved.approved = approvals.approved
    known_calls: dict[str, Json] = {}
    for call_id in orphan_call_ids(resolved.history):
        if (call := await store.find_call(call_id, scope=scope)) is not None:
            known_calls[call_id] = call
        elif conv.strict_calls:
            raise invalid(f"No tool call found for function call output with call_id '{call_id}'.", "input")
    readable = expand_sealed(resolved.history, sealer, scope) if sealer is not None else resolved.history
    resolved.messages = items_to_messages(readable, conv.instructions, known_calls)
    if not resolved.messages:
        raise invalid("The input has no messages to respond to.", "input")
    return resolved


def _is_system(item: Json) -> bool:
    return item.get("type") == "message" and item.get("role") in ("system", "developer")
