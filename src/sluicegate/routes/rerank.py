"""POST /v1/rerank (and /rerank): llama-server's, Jina's and Cohere's shape (dialects/rerank.py).

An engine that relays (an `openai` upstream that offers `/rerank`) gets the body as it came and
its server's answer goes back; a GGUF reranker runs `Engine.rerank` as a task (routes/jobs.py).
Any other model is a 400.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.rerank import parse_rerank_request, rerank_body
from sluicegate.engines.upstream.embeddings import RERANK_PATH
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import guarded, model_for, run_task
from sluicegate.turn.http import INSTANCE_HEADER


@dialect_endpoint("rerank", openai_error)
async def create_rerank(request: Request) -> Response:
    state = app_state(request)
    body = await read_json(request, state.settings.max_body_bytes)
    req = parse_rerank_request(body)
    model = model_for(state, req.model, "rerank")
    req = replace(req, model=model.id)  # the answer names the model that served it
    answer = await guarded(state, request, model.engine.relay(RERANK_PATH, body))
    if answer is not None:
        return JSONResponse(answer)
    job = req.rerank
    result, instance = await run_task(state, request, model, lambda engine: engine.rerank(job))
    return JSONResponse(rerank_body(req, result), headers={INSTANCE_HEADER: instance})


ROUTES = [
    Route("/v1/rerank", create_rerank, methods=["POST"]),
    Route("/rerank", create_rerank, methods=["POST"]),
]
