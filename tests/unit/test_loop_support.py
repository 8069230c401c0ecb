"""`settled()` (tests/loop_support.py) returns only once every other task is parked, however many
loop rounds that takes: the checks built on it cannot pass before the code had its turn."""

from __future__ import annotations

import asyncio

from loop_support import settled


async def test_a_long_chain_of_ready_steps_runs_to_its_end_first() -> None:
    steps = 0

    async def chain() -> None:
        nonlocal steps
        for _ in range(500):  # 500 loop rounds, more than any fixed handful of yields
            steps += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(chain())
    await settled()
    assert steps == 500 and task.done()


async def test_tasks_waiting_on_something_do_not_hold_it_up() -> None:
    never = asyncio.Event()
    parked = asyncio.ensure_future(never.wait())
    sleeping = asyncio.ensure_future(asyncio.sleep(3600))
    await settled()
    assert not parked.done() and not sleeping.done()
    parked.cancel()
    sleeping.cancel()
