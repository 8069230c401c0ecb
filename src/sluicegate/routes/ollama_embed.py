"""`POST /api/embed` (`{"embeddings": [[…]]}`) and the older `POST /api/embeddings`
(`{"embedding": […]}`), on the local embedding models `/v1/embeddings` serves."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.embeddings import EmbedInput, EmbedRequest, EmbedResult, check_inputs
from sluicegate.core.validation import INT32_MAX, Fields
from sluicegate.dialects.ollama.dialect import resolve_model
from sluicegate.routes.common import JSONResponse, app_state, read_json
from sluicegate.routes.embeddings import embed
from sluicegate.routes.jobs import model_for
from sluicegate.routes.ollama_models import endpoint
from sluicegate.turn.http import INSTANCE_HEADER
from sluicegate.turn.state import AppState

_NS = 1_000_000_000


async def _run(
    state: AppState, request: Request, f: Fields, inputs: list[EmbedInput], dimensions: int | None
) -> tuple[str, EmbedResult, str]:
    """The model name as sent, its vectors, and the instance that embedded them."""
    name = f.string("model", required=True) or ""
    model = model_for(state, name, "embeddings", lambda n: resolve_model(n, state.registry.models))
    check_inputs(inputs)  # the limits of every embeddings route (count, empty inputs)
    result, instance_id = await embed(state, request, model, EmbedRequest(inputs, dimensions))
    return name, result, instance_id


@endpoint
async def embed_many(request: Request) -> Response:
    state = app_state(request)
    started = time.perf_counter_ns()
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    value = f.obj.get("input")
    if isinstance(value, str):
        inputs: list[EmbedInput] = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        inputs = list(value)
    else:
        f.fail("input", "invalid input type: expected a string or an array of strings")
    f.boolean("truncate")
    f.object("options")
    dimensions = f.integer("dimensions", low=1, high=INT32_MAX)
    name, result, instance_id = await _run(state, request, f, inputs, dimensions)
    return JSONResponse(
        {
            "model": name,
            "embeddings": result.vectors,
            "total_duration": time.perf_counter_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": result.prompt_tokens,
        },
        headers={INSTANCE_HEADER: instance_id} if instance_id else None,
    )


@endpoint
async def embed_one(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    prompt = f.string("prompt")
    f.object("options")
    if not prompt:  # Ollama answers an empty prompt with an empty embedding
        resolve_model(f.string("model", required=True) or "", state.registry.models)
        return JSONResponse({"embedding": []})
    _, result, instance_id = await _run(state, request, f, [prompt], None)
    headers = {INSTANCE_HEADER: instance_id} if instance_id else None
    return JSONResponse({"embedding": result.vectors[0]}, headers=headers)
