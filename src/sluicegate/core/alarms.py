"""One event-loop timer for the clocks every stream keeps: its heartbeat, its deadline, its
upstream request's clocks.

An armed uvloop timer (`loop.call_at`) holds ~0.5 KiB for as long as it waits — the handle,
libuv's timer, a copy of the context — and a flowing stream keeps three of them for its whole
life, re-arming each lazily (bench/README.md, gateway "Round twelve"). Here they are entries
in one heap, ordered by due time, and the loop's single timer is armed for the earliest. These
clocks mostly never fire, so a cancelled entry stays where it is, marked, until it comes up or
until cancelled entries outnumber live ones (then the heap is rebuilt without them).

An alarm's callback runs in the loop's timer phase, as a `TimerHandle`'s does, in a context of
the loop's own rather than a copy of the caller's: none of these callbacks reads a ContextVar.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

_COMPACT_AT: Final = 256  # cancelled entries tolerated before the heap may be rebuilt
_EARLY: Final = 0.001  # a due time this close is due (the loop's timers have ms resolution)


class Alarm:
    """An armed alarm: `cancel()` it (any number of times) to stop its callback."""

    __slots__ = ("_clock", "callback")

    def __init__(self, clock: _Clock, callback: Callable[[], object]) -> None:
        self._clock = clock
        self.callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        if self.callback is not None:
            self.callback = None
            self._clock.cancelled()


class _Clock:
    """The alarms of one event loop."""

    __slots__ = ("_context", "_dead", "_due", "_handle", "_heap", "_seq", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, Alarm]] = []
        self._seq = itertools.count()  # ties in due time never compare the alarms
        self._dead = 0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._context = contextvars.Context()

    def at(self, when: float, callback: Callable[[], object]) -> Alarm:
        alarm = Alarm(self, callback)
        heap = self._heap
        heapq.heappush(heap, (when, next(self._seq), alarm))
        if self._handle is None or when < self._due:
            self._arm(when)
        return alarm

    def cancelled(self) -> None:
        self._dead += 1
        dead = self._dead
        if dead >= _COMPACT_AT and dead * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if entry[2].callback is not None]
            heapq.heapify(self._heap)
            self._dead = 0
            if not self._heap and self._handle is not None:
                self._handle.cancel()
                self._handle = None

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._due = when
        self._handle = self.loop.call_at(when, self._fire, context=self._context)

    def _fire(self) -> None:
        self._handle = None
        heap = self._heap
        due = self.loop.time() + _EARLY
        ring: list[Alarm] = []
        while heap and heap[0][0] <= due:
            alarm = heapq.heappop(heap)[2]
            if alarm.callback is None:
                self._dead -= 1
            else:
                ring.append(alarm)
        # Run once the heap is settled: a callback that re-arms for a time already due waits
        # for the next round, not this one.
        for alarm in ring:
            callback = alarm.callback
            if callback is None:  # cancelled by a callback before it (and counted as dead)
                self._dead -= 1
                continue
            alarm.callback = None  # fired: a `cancel()` after it is a no-op
            try:
                callback()
            except Exception as exc:  # as the loop reports a timer callback's error
                self.loop.call_exception_handler(
                    {"message": "Exception in an alarm callback", "exception": exc, "callback": callback}
                )
        if self._heap and self._handle is None:
            self._arm(self._heap[0][0])


_last: _Clock | None = None


def alarm_at(loop: asyncio.AbstractEventLoop, when: float, callback: Callable[[], object]) -> Alarm:
    """`loop.call_at(when, callback)` on the loop's shared timer; `Alarm.cancel()` to stop it."""
    global _last
    clock = _last
    if clock is None or clock.loop is not loop:
        clock = getattr(loop, "_sluicegate_alarms", None)
        if clock is None:
            clock = _Clock(loop)
            loop._sluicegate_alarms = clock  # type: ignore[attr-defined]  # dies with its loop
        _last = clock
    return clock.at(when, callback)
