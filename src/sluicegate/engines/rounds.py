"""A turn's rounds through one model, for the tool loop (`tools/loop.py`).

The loop itself knows only a round opener (`tools.loop.OpenRound`): tools and engines are
independent layers (docs/architecture.md, "Layering"), so what ties the loop to a model is here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from sluicegate.core.events import RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.engines.instances import Generation
from sluicegate.engines.models import Model

OpenRound = Callable[[ChatRequest], Awaitable[AsyncIterator[RawEvent]]]  # as `tools.loop.OpenRound`


def model_rounds(model: Model, first: Generation) -> OpenRound:
    """Rounds through `model`: the first is the generation the route already admitted (so a
    full queue is refused before the response starts); later ones are admitted afresh, so a
    busy model's slot is free while tools run."""
    pending: list[Generation] = [first]

    async def open_round(request: ChatRequest) -> AsyncIterator[RawEvent]:
        if pending:
            return pending.pop().events
        return (await model.admit(request)).events

    return open_round


def loop_generation(first: Generation, events: AsyncIterator[RawEvent]) -> Generation:
    """The tool loop's `events` as one generation, served by `first`'s instance. Closing it
    also closes `first`: a loop closed before it reached its first round must still give that
    round's queue place back."""
    return Generation(first.instance_id, _AlsoClosing(events, first))


class _AlsoClosing:
    """`events`, whose `aclose()` also closes an admitted generation they may never have
    started (closing one that did start is harmless)."""

    __slots__ = ("_events", "_first")

    def __init__(self, events: AsyncIterator[RawEvent], first: Generation) -> None:
        self._events = events
        self._first = first

    def __aiter__(self) -> _AlsoClosing:
        return self

    def __anext__(self) -> Awaitable[RawEvent]:
        return self._events.__anext__()  # the inner awaitable: no frame of ours per event

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._first.aclose()
