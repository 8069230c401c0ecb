"""Waiting for "nothing more can happen" in an asyncio test without a wall-clock sleep.

A fixed `asyncio.sleep(0.05)` before asserting that something did *not* happen passes
vacuously on a slow machine: the thing that should not happen may simply not have had its
turn yet. `settled()` instead runs the event loop until no callback is ready: every other task
is parked on an event, a future, a timer or I/O. Whatever the code under test could still do
without outside help, it has done by then, however slow the machine.
"""

from __future__ import annotations

import asyncio

# A cap so a task that reschedules itself forever (a busy loop) fails the test instead of hanging.
MAX_ROUNDS = 10_000


async def settled() -> None:
    """Yield to the loop until nothing but us is ready to run (twice in a row, for call_soon chains)."""
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(MAX_ROUNDS):
        await asyncio.sleep(0)
        # `_ready` is the loop's run queue (CPython's asyncio and uvloop's Python shim have no
        # public way to ask); without it, many rounds of sleep(0) are the fallback.
        ready = getattr(loop, "_ready", None)
        quiet = quiet + 1 if ready is not None and not ready else 0
        if quiet >= 2:
            return
    if getattr(loop, "_ready", None) is None:
        return
    raise AssertionError(f"the event loop never settled in {MAX_ROUNDS} rounds: something spins")
