"""POST /v1/rerank (and /rerank): llama-server's, Jina's and Cohere's shape (dialects/rerank.py).

An engine that relays (an `openai` upstream that offers `/rerank`) gets the body as it came and
its server's answer goes back; a GGUF reranker runs it as a job (routes/jobs.py). Any other
model is a 400.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.rerank import RERANK, RerankJob
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.rerank import parse_rerank_request, rerank_body
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import model_for, run_job
from sluicegate.turn.http import INSTANCE_HEADER

RERANK_PATH = "/rerank"


@dialect_endpoint("rerank", openai_error)
async def create_rerank(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    req = parse_rerank_request(body)
    model = model_for(state, req.model, "rerank")
    req = replace(req, model=model.id)  # the answer names the model that served it
    answer = await model.engine.relay(RERANK_PATH, body)
    if answer is not None:
        return JSONResponse(answer)
    job = RerankJob(req.query, req.documents)
    instance = await run_job(state, model, RERANK, job)
    assert job.result is not None
    return JSONResponse(rerank_body(req, job.result), headers={INSTANCE_HEADER: instance})


ROUTES = [
    Route("/v1/rerank", create_rerank, methods=["POST"]),
    Route("/rerank", create_rerank, methods=["POST"]),
]
