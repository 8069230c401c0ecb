"""`task_of`: asyncio's current task, by a C call (core/tasks.py)."""

from __future__ import annotations

import asyncio
import types

import uvloop

from sluicegate.core.tasks import task_of


def test_task_of_is_a_c_call() -> None:
    # A Python function here would be the frame it exists to save.
    assert isinstance(task_of, types.BuiltinFunctionType | types.BuiltinMethodType)


async def _inside() -> tuple[object, object, object]:
    loop = asyncio.get_running_loop()
    seen = task_of(loop)
    await asyncio.sleep(0)  # and after a suspension
    return seen, task_of(loop), asyncio.current_task()


def test_task_of_names_the_running_task_on_either_loop() -> None:
    for runner in (asyncio.run, uvloop.run):
        seen, again, current = runner(_inside())
        assert seen is current and again is current and current is not None


def test_task_of_outside_a_task_is_none() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert task_of(loop) is None
        # a callback of the loop runs outside any task
        found: list[object] = []
        loop.call_soon(lambda: found.append(task_of(loop)))
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert found == [None]
    finally:
        loop.close()
