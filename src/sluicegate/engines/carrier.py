"""A fast lane's two objects (engines/lane.py says what a lane is): the `Lane` a turn gives its
engine, and the `Carrier` the turn fills it with once its transport runs.

Compiled (`_compiled.py`), apart from lane.py's protocols (a compiled class cannot be
`runtime_checkable`): the relay's `lane.carrier` and `carrier.carry(...)` per carried read are
a native attribute read and a native call, where a `Callable` attribute was a generic call
with its arguments parsed (bench/README.md, gateway "Round sixteen", "the carry's calls").
"""

from __future__ import annotations

import asyncio

from sluicegate.core.events import RawEvent


class Carrier:
    """The turn's side of a lane (`TurnPipeline`): carries a read, or says the task must take it
    (engines/lane.py's docstring). A base class, not a callable or a protocol: compiled, the
    engine's call per read is a native one."""

    __slots__ = ()

    def carry(self, batch: list[RawEvent], task: asyncio.Task[object] | None, now: float) -> bool:
        raise NotImplementedError


class Lane:
    """What a turn gives its engine: the `carrier` once the stream's transport has started (None
    until then, and again once it stopped)."""

    __slots__ = ("carrier",)

    def __init__(self) -> None:
        self.carrier: Carrier | None = None
