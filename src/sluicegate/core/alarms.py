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
Alarms due at the same time fire in the order they were armed (libuv's timers do too; asyncio's
own heap does not promise it).

The heap holds the alarms themselves, each with its due time and its place in the arming order
as fields: compiled, both are unboxed (8 B each in the object), where an entry `(when, alarm)`
was a tuple and a float object besides the alarm (a sequence count in that tuple was a third
object, ~32 B, and was dropped for it): ~137 B an alarm before, ~73 B now (tracemalloc, 20,000
armed; pure Python ~129 B before, ~120 B now; bench/README.md, gateway "Round sixteen").
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

    __slots__ = ("callback", "order", "when")

    def __init__(self, callback: Callable[[], object] | None, when: float, order: int) -> None:
        self.callback = callback  # (compiled: a native constructor, no frame per alarm)
        self.when = when
        self.order = order  # its clock's count of alarms armed before it: ties fire in arm order

    def cancel(self) -> None:
        self.callback = None

    def __lt__(self, other: Alarm) -> bool:
        """The heap's order: due time, then arming order."""
        if self.when == other.when:
            return self.order < other.order
        return self.when < other.when


class _Clock:
    """The alarms of one event loop."""

    __slots__ = ("_context", "_due", "_handle", "_limit", "armed", "heap", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[Alarm] = []
        self.armed = 0  # alarms armed so far (the next one's `order`)
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
            heap = [alarm for alarm in self.heap if alarm.callback is not None]
            heapq.heapify(heap)
            self.heap = heap
            self._limit = max(_COMPACT_AT, 2 * len(heap))
            if heap:
                self._arm(heap[0].when)

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
        while heap and heap[0].when <= due:
            alarm = heapq.heappop(heap)
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
        while heap and heap[0].callback is None:  # nothing to wake up for
            heapq.heappop(heap)
        if heap and self._idle():
            self._arm(heap[0].when)

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
    alarm = Alarm(callback, when, clock.armed)
    clock.armed += 1
    heap = clock.heap
    heappush(heap, alarm)
    if clock._handle is None or when < clock._due or len(heap) > clock._limit:
        clock.pushed(when)
    return alarm
