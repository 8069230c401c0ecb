"""One event-loop timer for the clocks every stream keeps: its heartbeat, its deadline, its
upstream request's clocks.

An armed uvloop timer (`loop.call_at`) holds ~0.5 KiB for as long as it waits — the handle,
libuv's timer, a copy of the context — and a flowing stream keeps three of them for its whole
life, re-arming each lazily (bench/README.md, gateway "Round twelve"). Here they are entries
in one heap, ordered by due time, and the loop's single timer is armed for the earliest. These
clocks mostly never fire, so a cancelled entry stays where it is, marked, until it comes up or
until the heap has doubled since it was last rebuilt (then it is rebuilt without them).

An alarm's callback runs in the loop's timer phase, as a `TimerHandle`'s does, in a context of
the loop's own rather than a copy of the caller's: none of these callbacks reads a ContextVar.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from collections.abc import Callable
from heapq import heappush
from typing import Final

_COMPACT_AT: Final = 256  # the heap's least limit (cancelled entries are dropped past it)
_EARLY: Final = 0.001  # a due time this close is due (the loop's timers have ms resolution)


class Alarm:
    """An armed alarm: `cancel()` it (any number of times) to stop its callback."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], object] | None) -> None:
        self.callback = callback  # (compiled: a native constructor, no frame per alarm)

    def cancel(self) -> None:
        self.callback = None

    def __lt__(self, other: Alarm) -> bool:
        """Two entries due at the same time: either first (as asyncio's timers, which compare
        their due times only). An entry is `(when, alarm)`, no sequence number: a held stream
        keeps two or three, and a count's int was ~40 B of each."""
        return False


class _Clock:
    """The alarms of one event loop."""

    __slots__ = ("_context", "_due", "_handle", "_limit", "heap", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, Alarm]] = []
        self._limit = _COMPACT_AT  # entries the heap may hold before cancelled ones are dropped
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._context = contextvars.Context()

    def pushed(self, when: float) -> None:
        """An entry went in (`alarm_at`): the loop's timer for it when it is the earliest, and
        the cancelled entries dropped when the heap has grown past its limit."""
        if self._handle is None or when < self._due:
            self._arm(when)
        if len(self.heap) > self._limit:
            heap = [entry for entry in self.heap if entry[1].callback is not None]
            heapq.heapify(heap)
            self.heap = heap
            self._limit = max(_COMPACT_AT, 2 * len(heap))
            if heap:
                self._arm(heap[0][0])

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._due = when
        self._handle = self.loop.call_at(when, self._fire, context=self._context)

    def _fire(self) -> None:
        self._handle = None
        heap = self.heap
        due = self.loop.time() + _EARLY
        ring: list[Alarm] = []
        while heap and heap[0][0] <= due:
            alarm = heapq.heappop(heap)[1]
            if alarm.callback is not None:
                ring.append(alarm)
        # Run once the heap is settled: a callback that re-arms for a time already due waits
        # for the next round, not this one.
        for alarm in ring:
            callback = alarm.callback
            if callback is None:  # cancelled by a callback before it
                continue
            alarm.callback = None  # fired: a `cancel()` after it is a no-op
            try:
                callback()
            except Exception as exc:  # as the loop reports a timer callback's error
                self.loop.call_exception_handler(
                    {"message": "Exception in an alarm callback", "exception": exc, "callback": callback}
                )
        heap = self.heap
        while heap and heap[0][1].callback is None:  # nothing to wake up for
            heapq.heappop(heap)
        if heap and self._idle():
            self._arm(heap[0][0])

    def _idle(self) -> bool:
        """No loop timer is armed. (A method, not `self._handle is None` in `_fire`: after
        `_fire` set it to None, mypy takes it for None there although a callback may have armed
        it, and compiled, that read is checked as None: a TypeError in every round a callback
        armed an alarm.)"""
        return self._handle is None


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
    alarm = Alarm(callback)
    heap = clock.heap
    heappush(heap, (when, alarm))
    if clock._handle is None or when < clock._due or len(heap) > clock._limit:
        clock.pushed(when)
    return alarm
