"""Embeddings and rerank requests to a model: relayed by an engine that hands them on, or run
as a job through the instance machinery every request uses (admission, queueing, just-in-time
load, idle TTL) by an engine that does the work itself. Which, and whether at all, the engine
says (`Engine.tasks`, `Engine.relay`); a route never looks at an engine's class."""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.events import Failed
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import Task
from sluicegate.engines.models import Model
from sluicegate.turn.state import AppState

NOT_SERVED: dict[Task, str] = {
    "chat": "Model {model!r} does not chat.",
    "embeddings": "Model {model!r} is not an embedding model.",
    "rerank": "Model {model!r} is not a reranker.",
    "transcription": "Model {model!r} is not a speech-to-text model.",
    "speech": "Model {model!r} is not a text-to-speech model.",
}


def model_for(state: AppState, model_id: str, task: Task) -> Model:
    model = state.registry.get(model_id)
    if task not in model.engine.tasks():
        raise invalid(NOT_SERVED[task].format(model=model.id), param="model", code="model_not_supported")
    return model


async def run_job(state: AppState, model: Model, key: str, job: Any) -> str:
    """Run `job` (in `ChatRequest.extra[key]`) on the model; returns the instance that ran it.
    The engine puts the answer on the job."""
    release = state.admission.take()
    try:
        generation = model.open(ChatRequest(model=model.id, messages=[], extra={key: job}))
        try:
            async for event in generation.events:
                if isinstance(event, Failed):
                    raise SluicegateError(event.error.kind, event.error.message, code=event.error.code)
        finally:
            aclose = getattr(generation.events, "aclose", None)
            if aclose is not None:
                await aclose()
    finally:
        release()
    if getattr(job, "result", None) is None:
        raise SluicegateError(ErrorKind.ENGINE, f"model {model.id!r} returned no result", code="engine_error")
    return generation.instance_id
