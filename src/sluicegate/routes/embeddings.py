"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

A GGUF embedding model embeds through the instance machinery every request uses (admission,
queueing, just-in-time load, idle TTL); an `openai` upstream model gets the body as it came,
with the upstream's model name, and its answer is relayed. Any other model is a 400.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EMBED, Embedded, EmbeddingJob
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.events import Failed
from sluicegate.core.pipeline import unless_disconnected
from sluicegate.core.request import ChatRequest
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.llamacpp import LlamaCppEngine
from sluicegate.engines.models import Model
from sluicegate.engines.upstream import OpenAIUpstreamEngine
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.http import INSTANCE_HEADER, wait_for_disconnect


def embeds_locally(model: Model) -> bool:
    engine = model.engine
    return isinstance(engine, LlamaCppEngine) and engine.pooling is not None


async def embed(model: Model, job: EmbeddingJob) -> tuple[Embedded, str]:
    """Run one embedding job on a local embedding model: its vectors and the instance's id."""
    generation = model.open(ChatRequest(model=model.id, messages=[], extra={EMBED: job}))
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
            ErrorKind.ENGINE, f"model {model.id!r} returned no embeddings", code="engine_error"
        )
    return job.result, generation.instance_id


def not_embedding(model: Model) -> SluicegateError:
    return invalid(
        f"Model {model.id!r} is not an embedding model.", param="model", code="model_not_supported"
    )


async def _local(model: Model, body: Any) -> Response:
    req = parse_embeddings_request(body)
    result, instance_id = await embed(model, EmbeddingJob(req.job.inputs, req.job.dimensions))
    return JSONResponse(
        embeddings_body(req.model, result, req.encoding_format),
        headers={INSTANCE_HEADER: instance_id},
    )


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        parse_embeddings_request(body)  # raises the right 400
    model = state.registry.get(body["model"])
    engine = model.engine
    if isinstance(engine, OpenAIUpstreamEngine):
        parse_embeddings_request(body)  # the same 400s as a local model, before the upstream sees it
        # A client that leaves cancels the relay, which closes the upstream connection at once.
        answer = await unless_disconnected(engine.embeddings(body), lambda: wait_for_disconnect(request))
        return JSONResponse(answer)
    if embeds_locally(model):
        release = state.admission.take()
        try:
            return await _local(model, body)
        finally:
            release()
    raise not_embedding(model)


ROUTES = [
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/api/v0/embeddings", create_embeddings, methods=["POST"]),
]
