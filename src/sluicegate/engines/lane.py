"""A stream's fast lane: an upstream read carried to the client in the callback that received it.

In the usual path an upstream read wakes the task that streams the response, and its events go
up through the engine's relay, the instance and the turn's read loop before their bytes are
queued for the client. For the middle of a stream — text and tool-call deltas, usage — the
task wake-up costs several times what the work itself does (bench/README.md, "Round eight").
So a turn that qualifies (a plain stream: no tool loop, no tracing) offers its generation a
`Lane` (`Generation.read_through`); an engine that relays reads (`ReadsThrough`: the upstream
engines) takes it, and the turn fills in its `carrier` once its transport runs: the stream
core's second driver (`TurnPipeline.carry`, turn/pipeline.py), which pushes the read through the
same steps the task would take and hands the frames to the transport.

`carrier.carry(batch, task, now)` takes a read's raw events and returns True when it carried them,
or False, having changed nothing, when they must take the usual path: an event it does not
carry (the end, a failure, progress), a transport that is behind, or a waiting task that is not
the stream's own (`task`: the one waiting for the read). The engine then hands the same events
to its waiting task, in order. `now` is the loop's time (`loop.time()`) the engine read when the
read came in: the turn's clocks (its deadline's last event, the transport's last write) take
it rather than each reading the clock again (~0.3 k instructions a read each: bench/README.md,
gateway "Round sixteen").
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import ClassVar, Protocol, runtime_checkable

from sluicegate.core.events import RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.engines.carrier import Lane as Lane  # the lane itself: compiled, defined there


class Held(Protocol):
    """An instance's part of a generation that the engine's relay ends itself, so the two are
    one coroutine, not an instance loop passing on every event of the engine's
    (`engines/instances.py`): the slot was taken before the relay started."""

    def end(self, cancelled: bool) -> None:
        """The relay is over (`cancelled`: by a cancel or a close before its end): give the
        instance's slot back. Called once, last, on every path out of the relay."""
        ...


@runtime_checkable
class ReadsThrough(Protocol):
    """An engine that can hand reads to a lane while the stream's task waits for them."""

    def generate_through(
        self, request: ChatRequest, lane: Lane, held: Held | None = None
    ) -> AsyncIterator[RawEvent]:
        """`generate(request)`, offering each read that arrives while the task waits to `lane`;
        `held.end()` when it is over, on every path."""
        ...


class Starts:
    """How many requests have a start step ready to run and not yet run: a request that just
    arrived (its task created, its first step queued), or one whose upstream just answered or
    sent its first read (its task woken, not yet resumed). While any has, a read is carried in
    a callback queued behind that step instead of running ahead of it in the connection's
    callback — at 64 streams the lane's work in the callbacks delayed the starts
    (bench/README.md, "Round eleven"); until round twelve the read woke its stream's task
    instead, at several times the lane's cost. Counted by the upstream connection
    (engines/upstream/http.py) and the server's protocol (app/http_protocol.py)."""

    waiting: ClassVar[int] = 0  # (ClassVar: compiled modules assign it)
    # Off with SLUICEGATE_LANE_YIELDS=0: nothing is counted, the lane never yields (so a bench
    # can compare the two in one run: `bench/gateway.py`'s sg-chat-noyield).
    enabled: ClassVar[bool] = os.environ.get("SLUICEGATE_LANE_YIELDS", "1") != "0"
