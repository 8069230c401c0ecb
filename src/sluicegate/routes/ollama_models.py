"""Ollama's model endpoints: `/api/version`, `/api/tags`, `/api/show`, `/api/ps`,
`DELETE /api/delete`, `/api/copy`. Names carry tags (`name:latest`); files have no manifest
digest here, so a model's digest is a hash of what identifies its file (id, path, size, time)."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.config import models_dir
from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.validation import Fields
from sluicegate.dialects.ollama.dialect import resolve_model
from sluicegate.dialects.ollama.errors import ollama_error
from sluicegate.dialects.ollama.names import hf_name, is_valid_name, resolve_name, tagged
from sluicegate.engines.instances import Instance
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.turn.state import AppState

Json = dict[str, Any]
endpoint = dialect_endpoint("ollama", ollama_error)
# The Ollama API version this server's Ollama dialect follows (clients compare it).
OLLAMA_VERSION = "0.12.6"
FAR_FUTURE = "2318-08-24T00:00:00Z"  # Ollama's `expires_at` for a model kept loaded for good
# Copies live in memory and every name is listed (`/api/tags`, `/health`, metrics labels): bounded.
MAX_COPIES = 256


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _path(model: Model) -> Path | None:
    path = model.engine.info().details.get("path")
    return Path(path) if isinstance(path, str) else None


def _mtime(model: Model) -> float:
    path = _path(model)
    try:
        return path.stat().st_mtime if path is not None else float(model.engine.info().created)
    except OSError:
        return float(model.engine.info().created)


def digest(name: str, model: Model) -> str:
    info = model.engine.info()
    seed = f"{name}\0{info.details.get('path')}\0{info.details.get('size_bytes')}\0{_mtime(model)}"
    return hashlib.sha256(seed.encode()).hexdigest()


def details(model: Model) -> Json:
    info = model.engine.info()
    d = info.details
    quantization = d.get("quantization")
    level = quantization.get("name") if isinstance(quantization, dict) else None
    family = d.get("architecture") or info.engine
    return {
        "parent_model": "",
        "format": d.get("format") or info.engine,
        "family": family,
        "families": [family],
        "parameter_size": d.get("params_string") or "",
        "quantization_level": level or "",
    }


def _size(model: Model) -> int:
    size = model.engine.info().details.get("size_bytes")
    return size if isinstance(size, int) else 0


def listed_name(state: AppState, name: str, model: Model) -> str:
    """The name Ollama clients see: a file pulled from the Hub (`<models>/<owner>/<repo>/`) by
    the name the pull took, `hf.co/owner/repo:QUANT`, as Ollama lists it; any other, tagged."""
    path = _path(model)
    if name == model.id and path is not None:
        folder = os.path.abspath(models_dir(state.settings))
        full = os.path.abspath(path)
        if full.startswith(folder + os.sep):
            pulled = hf_name(os.path.relpath(full, folder))
            models = state.registry.models
            # Only if that name resolves to this file (of two files of one quantization, the first).
            if pulled is not None and resolve_name(pulled, models, lambda i: _text(_path(models[i]))) == name:
                return pulled
    return tagged(name)


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def tag_entry(tag: str, name: str, model: Model) -> Json:
    return {
        "name": tag,
        "model": tag,
        "modified_at": iso(_mtime(model)),
        "size": _size(model),
        "digest": digest(name, model),
        "details": details(model),
    }


def capabilities(model: Model) -> list[str]:
    info = model.engine.info()
    if info.details.get("type") == "embedding":
        return ["embedding"]
    if info.details.get("type") in ("stt", "tts"):  # speech models: none of Ollama's capabilities
        return []
    caps = info.capabilities
    out = ["completion"]
    if caps.tool_use:
        out.append("tools")
    if caps.reasoning:
        out.append("thinking")
    if caps.vision:
        out.append("vision")
    if caps.audio:  # Ollama's name for audio input (`model.CapabilityAudio`)
        out.append("audio")
    return out


def model_info(model: Model) -> Json:
    """The GGUF header's keys Ollama's `model_info` shows (what this server read of them)."""
    info = model.engine.info()
    gguf = getattr(model.engine, "gguf", None)
    arch = info.details.get("architecture") or info.engine
    out: Json = {"general.architecture": arch}
    if gguf is not None:
        out |= {
            "general.name": gguf.name,
            "general.parameter_count": gguf.parameters,
            f"{arch}.context_length": gguf.context_length,
            f"{arch}.embedding_length": gguf.embedding_length,
            f"{arch}.block_count": gguf.n_layers,
            "tokenizer.ggml.vocab_size": gguf.vocab_size,
        }
    elif info.context_length is not None:
        out[f"{arch}.context_length"] = info.context_length
    return {k: v for k, v in out.items() if v is not None}


def _model_of(state: AppState, name: str) -> Model:
    return state.registry.models[resolve_model(name, state.registry.models)]


def _name(f: Fields) -> str:
    name = f.string("model") or f.string("name")
    if not name:
        f.fail("model", "model is required")
    return name


@endpoint
async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION})


@endpoint
async def tags(request: Request) -> Response:
    state = app_state(request)
    listed = [tag_entry(listed_name(state, n, m), n, m) for n, m in state.registry.models.items()]
    return JSONResponse({"models": listed})


@endpoint
async def show(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    name = _name(f)
    f.boolean("verbose")
    model = _model_of(state, name)
    info = model.engine.info()
    parameters = f"num_ctx {info.context_length}" if info.context_length else ""
    template = getattr(model.engine, "template", None)
    return JSONResponse(
        {
            "modelfile": f"# Served by Sluicegate\nFROM {_path(model) or model.id}\n",
            "parameters": parameters,
            "template": template if isinstance(template, str) else "",
            "details": details(model),
            "model_info": model_info(model),
            "capabilities": capabilities(model),
            "modified_at": iso(_mtime(model)),
        }
    )


def expires_at(model: Model, instance: Instance) -> str:
    seconds = model.unloads_in(instance)
    return FAR_FUTURE if seconds is None else iso(time.time() + seconds)


@endpoint
async def ps(request: Request) -> Response:
    state = app_state(request)
    running: list[Json] = []
    for name, model in state.registry.models.items():
        for instance in model.loaded_instances():
            entry = tag_entry(listed_name(state, name, model), name, model)
            del entry["modified_at"]
            context = instance.config.context_length or model.engine.info().context_length
            entry |= {"expires_at": expires_at(model, instance), "size_vram": 0, "context_length": context}
            running.append(entry)
    return JSONResponse({"models": running})


@endpoint
async def delete(request: Request) -> Response:
    """Delete a downloaded model: its file goes, and it is no longer served. A model declared
    in the config (or served from elsewhere) is not this endpoint's to delete: a 400."""
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    name = _name(f)
    model_id = resolve_model(name, state.registry.models)
    model = state.registry.models[model_id]
    if model.id != model_id:  # a copy (`/api/copy`): only the name goes
        del state.registry.models[model_id]
        return Response(status_code=200)
    path = _path(model)
    folder = models_dir(state.settings).resolve()
    if path is None or folder not in path.resolve().parents:
        raise invalid(
            f"model '{name}' is not a downloaded file; remove it from the configuration instead", "model"
        )
    if model.busy:
        raise invalid(f"model '{name}' is in use", "model")
    await model.unload()
    for other, served in list(state.registry.models.items()):
        if served is model:
            del state.registry.models[other]
    path.unlink(missing_ok=True)
    return Response(status_code=200)


@endpoint
async def copy(request: Request) -> Response:
    """Another name for a served model (Ollama copies a manifest; the weights are shared)."""
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    source = f.string("source", required=True) or ""
    destination = (f.string("destination", required=True) or "").strip()
    if not destination:
        f.fail("destination", "destination is required")
    if not is_valid_name(destination):
        # Ollama's words; the name itself is not echoed (it may be megabytes, or markup).
        raise invalid("destination model name is invalid", "destination")
    model = _model_of(state, source)
    models = state.registry.models
    name = destination.removesuffix(":latest")
    # Ollama's names are case-insensitive: `SCRIPTED` would shadow `scripted` in some lookups.
    if name.lower() in {existing.lower() for existing in models}:
        raise SluicegateError(
            ErrorKind.INVALID_REQUEST, f"model '{destination}' already exists", param="destination"
        )
    if sum(1 for key, served in models.items() if key != served.id) >= MAX_COPIES:
        raise invalid(f"too many copies (at most {MAX_COPIES}); delete one first", "destination")
    models[name] = model
    return Response(status_code=200)
