"""The upstream request's clocks: first byte, idle between chunks, and total.

One alarm per request (on the loop's shared timer, `core/alarms.py`), re-armed lazily like
`core/deadlines.py`: a chunk only records the time. When a limit passes while the engine waits on the upstream, the waiting task is cancelled
(the engine turns that into a `Failed` event); when it passes at any other moment, the engine
sees `expired` at its next wait. The stream may be iterated by more than one task in turn (a
step the answer wait left in flight goes on in whoever reads the stream next), so the task to
cancel is the one that is waiting now, not the one that started.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from sluicegate.core.alarms import Alarm, alarm_at
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.tasks import task_of


class Clocks:
    __slots__ = (
        "_cancelled",
        "_first_byte",
        "_handle",
        "_idle",
        "_loop",
        "_phase_at",
        "_total",
        "_total_at",
        "expired",
        "first_byte_seen",
        "waiter",
    )

    def __init__(self, *, first_byte: float | None, idle: float | None, total: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        self._first_byte = first_byte
        self._idle = idle or math.inf
        self._total = total
        self._total_at = now + total if total else math.inf
        self._phase_at = now + first_byte if first_byte else math.inf
        self.waiter: asyncio.Task[object] | None = None  # the task waiting on the upstream now
        self._cancelled = False
        self._handle: Alarm | None = None  # (the loop's shared timer: `core/alarms.py`)
        self.expired: ErrorInfo | None = None
        self.first_byte_seen = False
        self._arm()

    def _arm(self) -> None:
        due = min(self._total_at, self._phase_at)
        if due != math.inf:
            self._handle = alarm_at(self._loop, due, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if now < min(self._total_at, self._phase_at):
            self._arm()
            return
        self._handle = None
        if self._total_at <= self._phase_at:
            self.expired = ErrorInfo(
                ErrorKind.TIMEOUT,
                f"The upstream did not finish within {self._total:g}s (total_timeout).",
                code="upstream_total_timeout",
            )
        elif self.first_byte_seen:
            self.expired = ErrorInfo(
                ErrorKind.TIMEOUT,
                f"The upstream sent nothing for {self._idle:g}s (idle_timeout).",
                code="upstream_idle_timeout",
            )
        else:
            self.expired = ErrorInfo(
                ErrorKind.TIMEOUT,
                f"The upstream sent no first byte within {self._first_byte:g}s (first_byte_timeout).",
                code="upstream_first_byte_timeout",
            )
        if self.waiter is not None:
            self._cancelled = True
            self.waiter.cancel()

    async def read(self, read: Callable[[], Awaitable[bytes | None]]) -> bytes | ErrorInfo | None:
        """`read()` with the clocks running: what arrived (None at the body's end), or the limit
        that passed while it waited (`expired`). A cancellation that is not the clocks' (the
        client left) and a broken connection raise. The relay's one wait per read, so `waiting`
        and `chunk` are inlined: no call more per read than awaiting `read()` itself."""
        self.waiter = task_of(self._loop)
        try:
            chunk = await read()
        except asyncio.CancelledError:
            if not self.owns(task_of(self._loop)):
                raise
            assert self.expired is not None
            return self.expired
        if chunk is not None:
            self.waiter = None
            self.first_byte_seen = True
            self._phase_at = self._loop.time() + self._idle
        return chunk

    def waiting(self) -> None:
        """The engine is about to wait on the upstream (call right before the await)."""
        self.waiter = task_of(self._loop)  # (given the loop: no getpid per read)

    def alive(self) -> float:
        """Something arrived and was relayed while the engine still waits (a read carried by the
        turn's fast lane, engines/lane.py): the upstream is alive, the wait goes on. Returns the
        loop's time it read (the lane's `now`)."""
        self.first_byte_seen = True
        now = self._loop.time()
        self._phase_at = now + self._idle
        return now

    def idle(self) -> None:
        """Not waiting on the upstream any more (the answer came, or the stream is over)."""
        self.waiter = None

    def owns(self, task: asyncio.Task[object] | None) -> bool:
        """Whether a cancellation of `task` came from these clocks, not from a client leaving;
        consumes that one cancellation if so."""
        if not self._cancelled or task is None:
            return False
        self._cancelled = False
        return task.uncancel() == 0

    def stop(self) -> None:
        self.waiter = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
