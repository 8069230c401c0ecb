"""POST /v1/embeddings (and LM Studio's /api/v0/embeddings, the same shape).

An engine that relays (an `openai` upstream) gets the body as it came and its server's answer
goes back; one that embeds itself (a GGUF embedding model) runs `Engine.embed` as a task
(routes/jobs.py). Any other model is a 400.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.embeddings import EmbedRequest, EmbedResult
from sluicegate.dialects.embeddings import embeddings_body, parse_embeddings_request
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.models import Model
from sluicegate.engines.upstream.embeddings import EMBEDDINGS_PATH
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import guarded, model_for, run_task
from sluicegate.turn.http import INSTANCE_HEADER
from sluicegate.turn.state import AppState


async def embed(
    state: AppState, request: Request, model: Model, job: EmbedRequest
) -> tuple[EmbedResult, str]:
    """One embedding task on any model that embeds: its vectors and the instance that ran it.
    For the dialects whose answers are not OpenAI's (Ollama's)."""
    return await run_task(state, request, model, lambda engine: engine.embed(job))


@dialect_endpoint("embeddings", openai_error)
async def create_embeddings(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str | None):
        parse_embeddings_request(body)  # raises the right 400
    model = model_for(state, body.get("model"), "embeddings")
    req = parse_embeddings_request(body)  # the same 400s for every engine, before an upstream sees it
    # A client that leaves cancels a relay, which closes the upstream connection at once.
    answer = await guarded(state, request, model.engine.relay(EMBEDDINGS_PATH, body))
    if answer is not None:
        return JSONResponse(answer)
    result, instance = await embed(state, request, model, req.embed)
    return JSONResponse(
        embeddings_body(model.id, result, req.encoding_format), headers={INSTANCE_HEADER: instance}
    )


ROUTES = [
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/api/v0/embeddings", create_embeddings, methods=["POST"]),
]
