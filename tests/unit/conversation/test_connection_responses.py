"""A WebSocket's connection-local responses: bounded, most recent kept, evictable."""

from __future__ import annotations

from sluicegate.conversation.local import ConnectionResponses
from sluicegate.store.base import StoredResponse


def record(response_id: str) -> StoredResponse:
    conversation = [{"type": "message", "role": "assistant", "content": response_id}]
    return StoredResponse(
        id=response_id,
        response={"id": response_id, "output": []},
        input_items=[],
        conversation=conversation,
        created_at=0.0,
        expires_at=0.0,
    )


def test_only_the_most_recent_are_kept() -> None:
    local = ConnectionResponses(2)
    for response_id in ("resp_a", "resp_b", "resp_c"):
        local.remember(record(response_id))
    assert len(local) == 2
    assert local.conversation("resp_a") is None
    assert local.conversation("resp_c") == record("resp_c").conversation


def test_evict_forgets_one() -> None:
    local = ConnectionResponses(4)
    local.remember(record("resp_a"))
    local.remember(record("resp_b"))
    local.evict("resp_a")
    local.evict("resp_never")
    assert "resp_a" not in local and "resp_b" in local
