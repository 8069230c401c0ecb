"""turn/live.py: a stored turn is findable while it streams, and `wait()` ends when it does."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from sluicegate.turn.live import LiveTurn


class _Encoder:
    def response_object(self) -> dict[str, Any]:
        return {"id": "resp_1", "status": "completed"}


def _live_turn(registry: dict[str, LiveTurn]) -> LiveTurn:
    return LiveTurn("resp_1", cast(Any, None), cast(Any, _Encoder()), registry)


async def test_wait_returns_the_snapshot_once_the_turn_leaves() -> None:
    registry: dict[str, LiveTurn] = {}
    turn = _live_turn(registry)
    with turn:
        assert registry == {"resp_1": turn}
        waiter = asyncio.ensure_future(turn.wait())
        await asyncio.sleep(0)
        assert not waiter.done() and not turn.finished
    assert registry == {} and turn.finished
    assert await asyncio.wait_for(waiter, 5) == {"id": "resp_1", "status": "completed"}


async def test_wait_after_the_end_does_not_block() -> None:
    turn = _live_turn({})
    with turn:
        pass
    assert turn._done is None  # nobody waited: no Event (and its waiter deque) was ever made
    assert await asyncio.wait_for(turn.wait(), 5) == {"id": "resp_1", "status": "completed"}


def test_the_snapshot_says_it_ended_only_once_it_is_stored() -> None:
    """Issue 47: a GET once read `completed` from memory before the record was written."""
    registry: dict[str, LiveTurn] = {}
    turn = _live_turn(registry)
    with turn:
        shown = turn.snapshot()
        assert shown["status"] == "in_progress" and turn.response_object()["status"] == "completed"
        turn.stored()  # what the persister calls once the record is durable
        assert turn.snapshot() == {"id": "resp_1", "status": "completed"}
