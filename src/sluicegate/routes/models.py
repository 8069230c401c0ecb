"""GET /v1/models and /v1/models/{id} in the OpenAI shape."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.scope import issued_key
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.base import Task
from sluicegate.engines.model_names import ModelNames
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint
from sluicegate.turn.http import allow_model


def _kind(tasks: frozenset[Task]) -> str:
    if "chat" not in tasks and ("transcription" in tasks or "speech" in tasks):  # speech models (issue 45)
        return "stt" if "transcription" in tasks else "tts"
    return "rerank" if "rerank" in tasks else "embeddings" if "embeddings" in tasks else "llm"


def model_object(model: Model, names: ModelNames | None = None) -> dict[str, Any]:
    info = model.engine.info()
    body: dict[str, Any] = {
        "id": info.id,
        "object": "model",
        "created": info.created,
        "owned_by": info.owned_by,
    }
    if names is not None:  # llama-server's: every name it answers to, and its labels
        body["aliases"] = names.names_of(model.id)
        body["tags"] = list(model.tags)
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
    names = app_state(request).registry.names
    allowed = [m for m in models if key is None or key.allows(m.id)]
    # `models`: llama-server's second list, Ollama's shape, which its web UI and clients read
    # (a model's capabilities: `multimodal` for images or audio).
    return JSONResponse(
        {
            "models": [llama_server_entry(m) for m in allowed],
            "object": "list",
            "data": [model_object(m, names) for m in allowed],
        }
    )


def llama_server_entry(model: Model) -> dict[str, Any]:
    info = model.engine.info()
    tasks = model.engine.tasks()
    capabilities = ["completion"] if "chat" in tasks else ["embedding"] if "embeddings" in tasks else []
    if info.capabilities.vision or info.capabilities.audio:
        capabilities.append("multimodal")
    details = info.details
    return {
        "name": info.id,
        "model": info.id,
        "modified_at": "",
        "size": details.get("size_bytes") or "",
        "digest": "",
        "type": "model",
        "description": details.get("description") or "",
        "tags": list(model.tags),
        "capabilities": capabilities,
        "parameters": "",
        "details": {
            "parent_model": "",
            "format": details.get("format") or "",
            "family": details.get("architecture") or "",
            "families": [details["architecture"]] if details.get("architecture") else [],
            "parameter_size": details.get("params_string") or "",
            "quantization_level": (details.get("quantization") or {}).get("name") or "",
        },
    }


@dialect_endpoint("models", openai_error)
async def get_model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    allow_model(issued_key(request.scope), model_id)
    registry = app_state(request).registry
    return JSONResponse(model_object(registry.get(model_id), registry.names))
