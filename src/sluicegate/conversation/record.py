"""A finished (or cut-off) turn as a store record, whichever dialect produced it.

The record keeps the response object as its client saw it, and this turn's input and the whole
conversation as our own items (`core/items.py`, stored form version 2), so any stateful dialect
continues it. The response's output is read into items by the store's reader (`Store.read_item`,
the Responses dialect's, set by the wiring).
"""

from __future__ import annotations

import time
from typing import Any

from sluicegate.conversation.resolve import Resolved
from sluicegate.core.items import items_from_json, items_to_json
from sluicegate.store.base import Store, StoredResponse

Json = dict[str, Any]


def stored_turn(
    response: Json,
    resolved: Resolved,
    retention_seconds: float,
    store: Store,
    events: list[bytes] | None = None,
) -> StoredResponse:
    now = time.time()
    output = items_from_json(response.get("output") or [], store.read_item)
    return StoredResponse(
        id=response["id"],
        response=response,
        input_items=items_to_json(resolved.input_items),
        conversation=items_to_json([*resolved.history, *output]),
        created_at=now,
        expires_at=now + retention_seconds,
        events=events or [],
    )
