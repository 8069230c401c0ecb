"""Heavy request checks off the event loop: decoding images and audio, tokenizing a long prompt,
preprocessing images through a projector (`Engine.check`). Each runs in a worker thread while
the loop serves everyone else, and at most `MAX_CHECKS` run at once, so a burst of heavy
requests waits its turn instead of taking all memory (each check's memory is bounded by the
request limits: `max_request_pixels`, `max_audio_seconds`, `max_body_bytes`)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MAX_CHECKS = 2  # at once, per event loop (process)

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


async def off_loop(check: Callable[[], T]) -> T:
    """`check()` in a worker thread, within the process's bound on checks at once. Cancelled while
    waiting for its turn, it never runs; cancelled while running, the thread finishes it."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(MAX_CHECKS)
    async with gate:
        return await asyncio.to_thread(check)
