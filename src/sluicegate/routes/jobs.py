"""Embeddings and rerank requests to a model: relayed by an engine that hands them on, or run
as a task (`Engine.embed`, `Engine.rerank`) through the instance machinery every request uses
(admission, queueing, just-in-time load, idle TTL) by an engine that does the work itself.
Which, and whether at all, the engine says (`Engine.tasks`, `Engine.relay`); a route never looks
at an engine's class. Either way the client leaving or the request deadline
(`request_timeout_seconds`) cancels the work, as it cancels a chat: 499 or 504, slot freed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request

from sluicegate.core.errors import EngineFailure, ErrorKind, SluicegateError
from sluicegate.core.pipeline import unless_disconnected
from sluicegate.engines.base import Engine, Task, not_served
from sluicegate.engines.models import Model
from sluicegate.turn.http import wait_for_disconnect
from sluicegate.turn.state import AppState

T = TypeVar("T")


def model_for(
    state: AppState, model_id: str | None, task: Task, own: Callable[[str], str] | None = None
) -> Model:
    """The model `model_id` means (aliases, `default_model`; `own`: the dialect's naming), if
    it serves `task`."""
    model = state.registry.resolve(model_id, own)
    if task not in model.engine.tasks():
        raise not_served(model.id, task)
    return model


async def run_task(
    state: AppState, request: Request, model: Model, work: Callable[[Engine], Awaitable[T]]
) -> tuple[T, str]:
    """`work` on one of the model's instances: its result and the instance that ran it."""
    release = state.admission.take()
    try:
        return await guarded(state, request, model.run(work))
    except EngineFailure as exc:  # a load or the engine failed: the dialect's error, not a 500
        raise SluicegateError(ErrorKind.ENGINE, str(exc), code=exc.code) from None
    finally:
        release()


async def guarded(state: AppState, request: Request, work: Awaitable[T]) -> T:
    """`work`, cancelled when the client leaves (a 499) or the request deadline passes (504)."""
    seconds = state.limits.request_timeout_seconds
    return await unless_disconnected(_within(work, seconds), lambda: wait_for_disconnect(request))


async def _within(work: Awaitable[T], seconds: float | None) -> T:
    if not seconds:
        return await work
    try:
        async with asyncio.timeout(seconds):
            return await work
    except TimeoutError:
        raise SluicegateError(
            ErrorKind.TIMEOUT, f"Request timed out after {seconds:g}s (request_timeout_seconds)."
        ) from None
