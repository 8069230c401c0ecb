"""Request deadline and idle timeout, applied to an engine's raw events.

When either passes, the engine is cancelled (it observes `CancelledError` at its current await)
and the stream ends with a `Failed` event, which every dialect renders as its own terminal
error frames. Heartbeats are not events, so they never reset the idle clock; any engine event
does (prompt-processing progress included: a model busy with a long prompt is not stuck).

One alarm per stream (on the loop's shared timer, `core/alarms.py`), not one per event: an
event only records the time, and the alarm, when it fires early, re-arms itself for the real
due time. That keeps the per-token cost to a clock read (a per-event `asyncio.timeout`
measured as most of the pipeline's cost).
"""

from __future__ import annotations

import asyncio
import math
import time

from sluicegate.core.alarms import Alarm, alarm_at
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import Failed
from sluicegate.core.tasks import task_of


class Deadline:
    """One stream's request deadline and idle timeout, for the loop that reads its events
    (`core/segmenter.py` `Reads`: no generator layer of its own): `arm()` in the reading task,
    set `last = clock()` on every read (the stream core's step, `Segments.push`, whichever
    driver pushes it), and on a `CancelledError` ask `owns_cancel()` whether it was this
    timer's, then end with `failure()`."""

    __slots__ = (
        "_handle",
        "_task",
        "clock",
        "deadline_seconds",
        "expired",
        "hard_at",
        "idle",
        "idle_seconds",
        "last",
    )

    def __init__(self, deadline_seconds: float | None, idle_seconds: float | None) -> None:
        self.deadline_seconds = deadline_seconds
        self.idle_seconds = idle_seconds
        self.expired: ErrorKind | None = None
        self._handle: Alarm | None = None  # (the loop's shared timer: `core/alarms.py`)
        self._task: asyncio.Task[object] | None = None
        self.hard_at = math.inf
        self.idle = idle_seconds or math.inf
        self.last = 0.0
        self.clock = time.monotonic

    @staticmethod
    def of(deadline_seconds: float | None, idle_seconds: float | None) -> Deadline | None:
        return Deadline(deadline_seconds, idle_seconds) if deadline_seconds or idle_seconds else None

    def arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = task_of(loop)  # a C call (`core/tasks.py`), given the loop
        assert self._task is not None
        self.clock = loop.time
        self.last = now = loop.time()
        if self.deadline_seconds:
            self.hard_at = now + self.deadline_seconds
        self._handle = alarm_at(loop, min(self.hard_at, self.last + self.idle), self._check)

    def _check(self) -> None:
        now = self.clock()
        due = min(self.hard_at, self.last + self.idle)
        if now < due:
            self._handle = alarm_at(asyncio.get_running_loop(), due, self._check)
            return
        self.expired = ErrorKind.TIMEOUT if self.hard_at <= self.last + self.idle else ErrorKind.IDLE_TIMEOUT
        assert self._task is not None
        self._task.cancel()

    def owns_cancel(self) -> bool:
        """True when the current cancellation is this timer's, not a real one (client gone)."""
        return self.expired is not None and self._task is not None and self._task.uncancel() == 0

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def failure(self) -> Failed:
        if self.expired is ErrorKind.TIMEOUT:
            return Failed(
                ErrorInfo(
                    ErrorKind.TIMEOUT,
                    f"Request timed out after {self.deadline_seconds:g}s (request_timeout_seconds).",
                )
            )
        return Failed(
            ErrorInfo(
                ErrorKind.IDLE_TIMEOUT,
                f"No output from the model for {self.idle_seconds:g}s (idle_timeout_seconds).",
            )
        )
