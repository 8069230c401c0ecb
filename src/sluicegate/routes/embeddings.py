"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

A GGUF embedding model embeds through the instance machinery every request uses (admission,
queueing, just-in-time load, idle TTL); an `openai` upstream model gets the body as it came,
with the upstream's model name, and its answer is relayed. Any other model is a 400.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EMBED, Embedded, EmbeddingJob
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError, invalid
from sluicegate.core.events import Failed
from sluicegate.core.request import ChatRequest
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.llamacpp import LlamaCppEngine
from sluicegate.engines.models import Model
from sluicegate.engines.upstream import OpenAIUpstreamEngine
from sluicegate.engines.upstream.errors import http_error
from sluicegate.engines.upstream.http import ConnectFailed
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.http import INSTANCE_HEADER

EMBEDDINGS_PATH = "/embeddings"
MAX_UPSTREAM_BODY = 256 << 20  # an upstream's answer is read whole: bounded


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


async def _upstream(engine: OpenAIUpstreamEngine, body: Any) -> Response:
    parse_embeddings_request(body)  # the same 400s as a local model, before the upstream sees it
    payload = orjson.dumps({**body, "model": engine.config.upstream_model})
    replica = engine.replicas.pick(set())
    if replica is None:
        raise SluicegateError(
            ErrorKind.UPSTREAM, "No upstream replica could be tried.", code="upstream_unavailable"
        )
    replica.outstanding += 1
    try:
        response = await replica.pool.post_stream(EMBEDDINGS_PATH, payload)
        try:
            data = b""
            async for chunk in response.chunks():
                data += chunk
                if len(data) > MAX_UPSTREAM_BODY:
                    raise SluicegateError(ErrorKind.UPSTREAM, "The upstream's embeddings are too large.")
        finally:
            await response.aclose()
    except ConnectFailed as exc:
        engine.replicas.connect_failed(replica, str(exc))
        raise SluicegateError(
            ErrorKind.UPSTREAM,
            f"Could not reach the upstream {replica.name}: {exc}",
            code="upstream_unavailable",
        ) from exc
    finally:
        replica.outstanding -= 1
    if not 200 <= response.status < 300:
        info: ErrorInfo = http_error(response.status, data, replica.name, engine.model_id)
        raise SluicegateError(info.kind, info.message, param=info.param, code=info.code)
    answer = orjson.loads(data)
    if isinstance(answer, dict) and "model" in answer:
        answer["model"] = engine.model_id  # the client asked for our id
    return JSONResponse(answer)


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        parse_embeddings_request(body)  # raises the right 400
    model = state.registry.get(body["model"])
    engine = model.engine
    if isinstance(engine, OpenAIUpstreamEngine):
        return await _upstream(engine, body)
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
