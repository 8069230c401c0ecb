"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

An engine that relays (an `openai` upstream) gets the body as it came and its server's answer
goes back; one that embeds itself (a GGUF embedding model) runs it as a job (routes/jobs.py).
Any other model is a 400.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EMBED, Embedded, EmbeddingJob
from sluicegate.core.pipeline import unless_disconnected
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.models import Model
from sluicegate.engines.upstream.embeddings import EMBEDDINGS_PATH
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import model_for, run_job
from sluicegate.turn.http import INSTANCE_HEADER, wait_for_disconnect
from sluicegate.turn.state import AppState


async def embed(state: AppState, model: Model, job: EmbeddingJob) -> tuple[Embedded, str]:
    """One embedding job on any model that embeds: its vectors and the instance that ran it
    ("" for an upstream, which gets the job as an OpenAI embeddings body). For the dialects
    whose answers are not OpenAI's (Ollama's)."""
    body: dict[str, Any] = {"input": job.inputs}
    if job.dimensions is not None:
        body["dimensions"] = job.dimensions
    answer = await model.engine.relay(EMBEDDINGS_PATH, body)
    if answer is not None:  # checked by the engine: `data` holds one vector per input
        usage = answer.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        vectors = [item["embedding"] for item in answer["data"]]
        return Embedded(vectors, tokens if isinstance(tokens, int) else 0), ""
    instance = await run_job(state, model, EMBED, job)
    assert job.result is not None
    return job.result, instance


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str | None):
        parse_embeddings_request(body)  # raises the right 400
    model = model_for(state, body.get("model"), "embeddings")
    req = parse_embeddings_request(body)  # the same 400s for every engine, before an upstream sees it
    # A client that leaves cancels a relay, which closes the upstream connection at once.
    answer = await unless_disconnected(
        model.engine.relay(EMBEDDINGS_PATH, body), lambda: wait_for_disconnect(request)
    )
    if answer is not None:
        return JSONResponse(answer)
    job = EmbeddingJob(req.job.inputs, req.job.dimensions)
    instance = await run_job(state, model, EMBED, job)
    assert job.result is not None
    return JSONResponse(
        embeddings_body(model.id, job.result, req.encoding_format), headers={INSTANCE_HEADER: instance}
    )


ROUTES = [
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/api/v0/embeddings", create_embeddings, methods=["POST"]),
]
