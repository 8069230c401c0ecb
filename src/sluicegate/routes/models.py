"""GET /v1/models and /v1/models/{id} in the OpenAI shape."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.scope import issued_key
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.base import Task
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint
from sluicegate.turn.http import allow_model


def _kind(tasks: frozenset[Task]) -> str:
    if "chat" not in tasks and ("transcription" in tasks or "speech" in tasks):  # speech models (issue 45)
        return "stt" if "transcription" in tasks else "tts"
    return "rerank" if "rerank" in tasks else "embeddings" if "embeddings" in tasks else "llm"


def model_object(model: Model) -> dict[str, Any]:
    info = model.engine.info()
    body: dict[str, Any] = {
        "id": info.id,
        "object": "model",
        "created": info.created,
        "owned_by": info.owned_by,
    }
    details = info.details
    if details.get("format"):  # a local model file: what it is, as llama-server's `meta` tells
        quantization = details.get("quantization") or {}
        body["meta"] = {
            "format": details["format"],
            "architecture": details.get("architecture"),
            "quantization": quantization.get("name"),
            "size_bytes": details.get("size_bytes"),
            "params_string": details.get("params_string"),
            "context_length": info.context_length,
            "tool_use": info.capabilities.tool_use,
            "reasoning": info.capabilities.reasoning,
            "vision": info.capabilities.vision,
            "audio": info.capabilities.audio,
            "description": details.get("description"),
            "type": _kind(model.engine.tasks()),
            "context": details.get("context"),
        }
    return body


@dialect_endpoint("models", openai_error)
async def list_models(request: Request) -> Response:
    models = app_state(request).registry.models.values()
    key = issued_key(request.scope)  # a runtime key limited to some models lists only those
    listed = [model_object(m) for m in models if key is None or key.allows(m.id)]
    return JSONResponse({"object": "list", "data": listed})


@dialect_endpoint("models", openai_error)
async def get_model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    allow_model(issued_key(request.scope), model_id)
    model = app_state(request).registry.get(model_id)
    return JSONResponse(model_object(model))
