"""The task running on a loop, found without a Python frame.

Why: on CPython 3.11 `asyncio.current_task` is a Python function (a frame per call, ~1 k
instructions; six calls a request start, one a relayed read: bench/README.md, gateway "Round
fifteen (issue 43, part 7): the request start's first half, again"). The table it reads is the C
module's own dict (`_asyncio._current_tasks`, which asyncio's C tasks enter and leave), and that
dict's `get` is a C call from compiled and interpreted code alike.

That table is private, so `_task_getter` (the one place that decides) takes it only when it is
what we expect, checked once at import:
- it is `_asyncio._current_tasks` itself, a plain dict (not a copy or a Python-level table);
- a task entered on a loop by asyncio's own `_enter_task` is what both its `get` and
  `asyncio.current_task` answer for that loop, and neither answers after `_leave_task`
  (a sentinel loop and task: no event loop is run at import, which would fail when this module
  is first imported inside a running loop, and costs a loop's file descriptors).
Otherwise `task_of` is `asyncio.current_task` itself: the same answer, a frame dearer.

Other versions, from CPython's sources:
- 3.12 and 3.13: `asyncio.current_task` is the C function (`_asyncio.current_task`, gh-100344,
  "What's New in 3.12"), so it is used directly and the table is never read.
- 3.14+: the running task lives in the thread state; `Lib/asyncio/tasks.py` no longer imports
  `_current_tasks` from `_asyncio`, so `asyncio.tasks._current_tasks` is the pure-Python dict C
  tasks never fill. `current_task` is C there too (taken first); were it not, the checks above
  refuse that dict (it is not `_asyncio`'s, and an entered task is not found in it).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

TaskGetter = Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]


def _c_table() -> object:
    """The C module's table of running tasks, or None (no `_asyncio`, or a version without it)."""
    try:
        import _asyncio
    except ImportError:  # pragma: no cover - CPython builds it
        return None
    return getattr(_asyncio, "_current_tasks", None)


def _agrees(getter: Callable[[Any], object]) -> bool:
    """A task entered on a loop by asyncio's own `_enter_task` is what `getter` and
    `asyncio.current_task` answer for that loop, and neither answers once it has left."""
    enter = getattr(asyncio.tasks, "_enter_task", None)
    leave = getattr(asyncio.tasks, "_leave_task", None)
    if enter is None or leave is None:
        return False
    loop, task = object(), object()  # sentinels: no real loop's entry is touched
    current: Callable[[Any], object] = asyncio.current_task
    try:
        enter(loop, task)
        try:
            inside = getter(loop) is task and current(loop) is task
        finally:
            leave(loop, task)
        return inside and getter(loop) is None and current(loop) is None
    except Exception:  # anything unexpected: asyncio's own answer
        return False


def _task_getter() -> TaskGetter:
    """`asyncio.current_task` where it is C (3.12+); 3.11's C table's `get` where the checks
    above hold; `asyncio.current_task` otherwise."""
    if isinstance(asyncio.current_task, types.BuiltinFunctionType):  # 3.12+: C already
        return asyncio.current_task
    table = getattr(asyncio.tasks, "_current_tasks", None)
    if table is None or table is not _c_table() or type(table) is not dict:
        return asyncio.current_task
    getter = table.get
    if not isinstance(getter, types.BuiltinMethodType) or not _agrees(getter):
        return asyncio.current_task
    found: TaskGetter = getter
    return found


# `task_of(loop)`: the task running on `loop` (the loop must be given), or None.
task_of = _task_getter()
