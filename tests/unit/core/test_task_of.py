"""`task_of`: asyncio's current task, by a C call (core/tasks.py)."""

from __future__ import annotations

import asyncio
import types

import pytest
import uvloop

from sluicegate.core.tasks import _task_getter, task_of


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


# The choice (`_task_getter`), with asyncio's private table as expected and otherwise.


def test_the_c_table_is_taken_when_it_is_what_we_expect() -> None:
    import _asyncio

    if isinstance(asyncio.current_task, types.BuiltinFunctionType):  # 3.12+: C already
        assert _task_getter() is asyncio.current_task
        return
    table = _asyncio._current_tasks  # type: ignore[attr-defined]
    getter: object = _task_getter()
    assert getter == table.get  # the C module's dict's own `get`
    assert getattr(getter, "__self__", None) is table


def test_without_the_table_task_of_is_asyncios_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio, "current_task", _python_current_task())
    monkeypatch.delattr(asyncio.tasks, "_current_tasks")
    assert _task_getter() is asyncio.current_task


def test_a_table_that_is_not_the_c_modules_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio, "current_task", _python_current_task())
    monkeypatch.setattr(asyncio.tasks, "_current_tasks", {})  # a dict, but not the one tasks fill
    assert _task_getter() is asyncio.current_task


def test_a_table_that_disagrees_with_current_task_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The C module's dict, but asyncio's `_enter_task` no longer writes it (as on 3.14, where
    # the running task lives in the thread state): the entered sentinel is not found there.
    monkeypatch.setattr(asyncio, "current_task", _python_current_task())
    entered: dict[object, object] = {}
    monkeypatch.setattr(asyncio.tasks, "_enter_task", entered.__setitem__)
    monkeypatch.setattr(asyncio.tasks, "_leave_task", lambda loop, task: entered.pop(loop))
    assert _task_getter() is asyncio.current_task


def test_where_current_task_is_c_it_is_taken_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    builtin: object = len  # any C function stands for 3.12+'s `_asyncio.current_task`
    monkeypatch.setattr(asyncio, "current_task", builtin)
    monkeypatch.delattr(asyncio.tasks, "_current_tasks")
    assert _task_getter() is builtin


def _python_current_task() -> object:
    """A Python-level `current_task` reading the real table (3.11's shape on any version)."""

    def current_task(loop: object = None) -> object:
        table = getattr(asyncio.tasks, "_current_tasks", None)
        return None if table is None else table.get(loop)

    return current_task
