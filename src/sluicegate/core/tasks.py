"""The task running on a loop, found without a Python frame.

On CPython 3.11 `asyncio.current_task` is a Python function (a frame per call, ~1 k
instructions: six a request start, one a relayed read); the table it reads is the C module's
own (`_asyncio._current_tasks`, which asyncio's tasks enter and leave). From 3.12 on
`asyncio.current_task` is the C function itself. `task_of(loop)` is whichever of the two is a
builtin: the same answer, a C call from compiled and interpreted code alike.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any


def _task_getter() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    if isinstance(asyncio.current_task, types.BuiltinFunctionType):  # 3.12+: C already
        return asyncio.current_task
    table = getattr(asyncio.tasks, "_current_tasks", None)  # 3.11: the C module's table
    getter = getattr(table, "get", None)
    if isinstance(getter, types.BuiltinMethodType):
        found: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = getter
        return found
    return asyncio.current_task  # anything else: asyncio's own answer


# `task_of(loop)`: the task running on `loop` (the loop must be given), or None.
task_of = _task_getter()
