"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

Which models embed, and how, is the engine's to say (`Engine.tasks`, `Engine.relay`): an engine
that relays (an `openai` upstream) gets the body as it came and its server's answer goes back;
one that embeds itself (a GGUF embedding model) gets the job through the instance machinery
every request uses (admission, queueing, just-in-time load, idle TTL). Any other model is a 400.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EMBED, EmbeddingJob
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.events import Failed
from sluicegate.core.request import ChatRequest
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.http import INSTANCE_HEADER

EMBEDDINGS_PATH = "/embeddings"


async def _local(model: Model, body: Any) -> Response:
    req = parse_embeddings_request(body)
    job = EmbeddingJob(req.job.inputs, req.job.dimensions)
    generation = model.open(ChatRequest(model=req.model, messages=[], extra={EMBED: job}))
    try:
        async for event in generation.events:
            if isinstance(event, Failed):
                raise SluicegateError(event.error.kind, event.error.message, code=event.error.code)
    finally:
        aclose = getattr(generation.events, "aclose", None)
        if aclose is not None:
            await aclose()
    if job.result is None:
        raise SluicegateError(
            ErrorKind.ENGINE, f"model {req.model!r} returned no embeddings", code="engine_error"
        )
    return JSONResponse(
        embeddings_body(req.model, job.result, req.encoding_format),
        headers={INSTANCE_HEADER: generation.instance_id},
    )


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        parse_embeddings_request(body)  # raises the right 400
    model = state.registry.get(body["model"])
    engine = model.engine
    if "embeddings" not in engine.tasks():
        raise invalid(
            f"Model {model.id!r} is not an embedding model.", param="model", code="model_not_supported"
        )
    parse_embeddings_request(body)  # the same 400s for every engine, before an upstream sees it
    answer = await engine.relay(EMBEDDINGS_PATH, body)
    if answer is not None:
        return JSONResponse(answer)
    release = state.admission.take()
    try:
        return await _local(model, body)
    finally:
        release()


ROUTES = [
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/api/v0/embeddings", create_embeddings, methods=["POST"]),
]
