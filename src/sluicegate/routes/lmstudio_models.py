"""LM Studio REST v1 models API: list, load, unload, and the download endpoints."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.validation import INT32_MAX, Fields
from sluicegate.dialects.lmstudio.encoder import lmstudio_error
from sluicegate.dialects.lmstudio.request import reject_unknown_keys
from sluicegate.engines.base import LoadConfig
from sluicegate.engines.downloads import DownloadError, Target, describe
from sluicegate.engines.instances import Instance
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json


def check_context_length(model: Model, context_length: int | None) -> None:
    maximum = model.engine.info().context_length
    if context_length is not None and maximum is not None and context_length > maximum:
        raise invalid(
            f"context_length {context_length} is above the maximum of model '{model.id}' ({maximum}).",
            "context_length",
            code="invalid_value",
        )


Json = dict[str, Any]
endpoint = dialect_endpoint("lmstudio", lmstudio_error)
# LM Studio's load body takes no `ttl` (and we keep its body exact); `sluicegate models load
# --ttl` sends the idle TTL of an explicit load in this header instead.
TTL_HEADER = "X-Sluicegate-TTL"
LOAD_KEYS = frozenset(
    {
        "model",
        "context_length",
        "eval_batch_size",
        "flash_attention",
        "num_experts",
        "offload_kv_cache_to_gpu",
        "echo_load_config",
    }
)


def _instance_config(model: Model, instance: Instance) -> Json:
    info = instance.engine.info()
    context_length = instance.config.context_length or info.context_length
    return {"context_length": context_length, "parallel": model.max_concurrency}


def _loaded(model: Model, instance: Instance) -> Json:
    loaded: Json = {"id": instance.instance_id, "config": _instance_config(model, instance)}
    seconds = model.unloads_in(instance)
    if seconds is not None:  # Sluicegate's: when the idle TTL unloads it, if nothing uses it first
        loaded["unloads_in_seconds"] = round(seconds)
    return loaded


def model_entry(model: Model) -> Json:
    info = model.engine.info()
    details = info.details
    caps = info.capabilities
    capabilities: Json = {"vision": caps.vision, "trained_for_tool_use": caps.tool_use}
    if caps.audio:  # not in LM Studio's schema (it has no audio input): said only where it applies
        capabilities["audio"] = True
    if caps.reasoning:
        capabilities["reasoning"] = {
            "allowed_options": caps.reasoning_options,
            "default": caps.reasoning_default,
        }
    entry: Json = {
        "type": details.get("type", "llm"),
        "publisher": details.get("publisher", info.owned_by),
        "key": info.id,
        "engine": info.engine,  # Sluicegate's: which engine serves it
        "display_name": info.display_name or info.id,
        "architecture": details.get("architecture"),
        "quantization": details.get("quantization"),
        "size_bytes": details.get("size_bytes", 0),
        "params_string": details.get("params_string"),
        "loaded_instances": [_loaded(model, i) for i in model.loaded_instances()],
        "max_context_length": info.context_length,
        "format": details.get("format"),
        "capabilities": capabilities,
    }
    if details.get("description"):
        entry["description"] = details["description"]
    if details.get("context"):  # how the loaded context was chosen (llamacpp)
        entry["context"] = details["context"]
    return entry


@endpoint
async def list_lmstudio_models(request: Request) -> Response:
    models = app_state(request).registry.models.values()
    return JSONResponse({"models": [model_entry(m) for m in models]})


def _model_not_found(model_id: str, param: str) -> SluicegateError:
    return SluicegateError(
        ErrorKind.NOT_FOUND, f"Model '{model_id}' not found.", param=param, code="model_not_found"
    )


def _ttl_header(request: Request) -> float | None:
    text = request.headers.get(TTL_HEADER)
    if text is None:
        return None
    try:
        ttl = float(text)
    except ValueError:
        ttl = 0.0
    if not 1 <= ttl <= INT32_MAX:
        raise invalid(
            f"{TTL_HEADER} must be a number of seconds >= 1 (and <= {INT32_MAX}), got {text[:40]!r}.",
            "ttl",
            "invalid_value",
        )
    return ttl


@endpoint
async def load_model(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    reject_unknown_keys(f, LOAD_KEYS)
    model_id = f.string("model", required=True) or ""
    context_length = f.integer("context_length", low=1, high=INT32_MAX)
    f.integer("eval_batch_size", low=1, high=INT32_MAX)
    f.boolean("flash_attention")
    f.integer("num_experts", low=1, high=INT32_MAX)
    f.boolean("offload_kv_cache_to_gpu")
    echo = bool(f.boolean("echo_load_config"))
    ttl = _ttl_header(request)
    model = state.registry.models.get(model_id)
    if model is None:
        raise _model_not_found(model_id, "model")
    check_context_length(model, context_length)
    config = LoadConfig(context_length=context_length)
    instance, seconds = await model.load(new_instance=True, config=config, ttl=ttl)
    body: Json = {
        "type": "llm",
        "instance_id": instance.instance_id,
        "load_time_seconds": round(seconds, 3),
        "status": "loaded",
    }
    if echo:
        body["load_config"] = _instance_config(model, instance)
    return JSONResponse(body)


@endpoint
async def unload_model(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    reject_unknown_keys(f, frozenset({"instance_id"}))
    instance_id = f.string("instance_id", required=True) or ""
    found = state.registry.find_instance(instance_id)
    if found is None or not found[1].loaded:
        raise _model_not_found(instance_id, "instance_id")
    await found[0].unload(instance_id)
    return JSONResponse({"instance_id": instance_id})


@endpoint
async def download_model(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    reject_unknown_keys(f, frozenset({"model", "quantization"}))
    model = f.string("model", required=True) or ""
    quantization = f.string("quantization")
    try:
        started = await state.downloads.start(model, quantization)
    except DownloadError as exc:
        raise invalid(str(exc), exc.param, "invalid_value") from exc
    if isinstance(started, Target):  # LM Studio answers just this status, without a job
        return JSONResponse(
            {
                "status": "already_downloaded",
                "model": model,
                "file": started.filename,
                "path": str(started.destination),
                "total_size_bytes": started.destination.stat().st_size,
            }
        )
    return JSONResponse(started.body())


@endpoint
async def download_status(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    job = app_state(request).downloads.get(job_id)
    if job is None:
        raise SluicegateError(
            ErrorKind.NOT_FOUND, f"No download job with id '{job_id}'.", param="job_id", code="job_not_found"
        )
    return JSONResponse(job.body())


# --- Sluicegate's additions to LM Studio's download API (the models page uses them) ------------


@endpoint
async def download_options(request: Request) -> Response:
    """`GET /api/v1/models/download/options?model=owner/repo`: the repository's GGUF files, each
    with its quantization and size, to choose the `quantization` of a download from."""
    state = app_state(request)
    ref = request.query_params.get("model", "").strip()
    if not ref:
        raise invalid("Name a repository: ?model=owner/repo.", "model", "missing_required_parameter")
    try:
        files = await state.downloads.options(ref)
    except DownloadError as exc:
        raise invalid(str(exc), exc.param, "invalid_value") from exc
    except Exception as exc:  # the Hub did not answer, or does not know the repository
        raise SluicegateError(
            ErrorKind.NOT_FOUND,
            describe(exc, ref, state.downloads.endpoint),
            param="model",
            code="model_not_found",
        ) from exc
    return JSONResponse(
        {
            "model": ref,
            "files": [
                {"file": f.filename, "quantization": f.quantization, "size_bytes": f.size} for f in files
            ],
        }
    )


@endpoint
async def cancel_download(request: Request) -> Response:
    """`POST /api/v1/models/download/cancel {"job_id"}`: stop a download at its next chunk; its
    status ends `cancelled`."""
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    reject_unknown_keys(f, frozenset({"job_id"}))
    job_id = f.string("job_id", required=True) or ""
    job = state.downloads.cancel(job_id)
    if job is None:
        raise SluicegateError(
            ErrorKind.NOT_FOUND, f"No download job with id '{job_id}'.", param="job_id", code="job_not_found"
        )
    return JSONResponse(job.body())
