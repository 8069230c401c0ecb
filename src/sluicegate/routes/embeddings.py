"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

An engine that relays (an `openai` upstream) gets the body as it came and its server's answer
goes back; one that embeds itself (a GGUF embedding model) runs it as a job (routes/jobs.py).
Any other model is a 400.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EMBED, EmbeddingJob
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import model_for, run_job
from sluicegate.turn.http import INSTANCE_HEADER

EMBEDDINGS_PATH = "/embeddings"


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        parse_embeddings_request(body)  # raises the right 400
    model = model_for(state, body["model"], "embeddings")
    req = parse_embeddings_request(body)  # the same 400s for every engine, before an upstream sees it
    answer = await model.engine.relay(EMBEDDINGS_PATH, body)
    if answer is not None:
        return JSONResponse(answer)
    job = EmbeddingJob(req.job.inputs, req.job.dimensions)
    instance = await run_job(state, model, EMBED, job)
    assert job.result is not None
    return JSONResponse(
        embeddings_body(req.model, job.result, req.encoding_format), headers={INSTANCE_HEADER: instance}
    )


ROUTES = [
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/api/v0/embeddings", create_embeddings, methods=["POST"]),
]
