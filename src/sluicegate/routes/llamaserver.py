"""llama-server's non-generating endpoints: `POST /tokenize`, `/detokenize`, `/apply-template`,
`GET /props`, `GET /slots` and `POST /slots/{id}` (save, restore, erase), answered by the model's own tokenizer and chat template (the engine's
optional methods); shapes in `sluicegate.dialects.llamaserver.tokens`.

llama-server serves one model and its clients name none: a request without `model` goes to
`[server] default_model`, else the first model that completes text (`served_name`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate import __version__
from sluicegate.config import slot_save_dir
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.slots import parse_slot_action, slot_action_body
from sluicegate.dialects.llamaserver.tokens import (
    detokenize_body,
    parse_detokenize,
    parse_tokenize,
    props_body,
    slots_body,
    tokenize_body,
)
from sluicegate.engines.base import Engine
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry
from sluicegate.engines.slots import LoraStore, SlotStore
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json

DIALECT = "llamaserver"


def served_name(registry: Registry) -> str | None:
    """The model a llama-server request without `model` means: the default model, else the
    first that completes text (None: let the registry say a model is needed)."""
    if registry.names.default is not None:
        return registry.names.default
    return next((m.id for m in registry.models.values() if m.engine.info().capabilities.completion), None)


def _model(request: Request, name: str | None) -> Model:
    registry = app_state(request).registry
    return registry.resolve(name or served_name(registry))


def _engine(model: Model) -> Engine:
    """A loaded instance's engine when there is one (its tokenizer is at hand), else the first."""
    loaded = model.loaded_instances()
    return loaded[0].engine if loaded else model.engine


def _cannot(model: Model, what: str) -> SluicegateError:
    return SluicegateError(
        ErrorKind.NOT_IMPLEMENTED,
        f"Model {model.id!r} has no {what} Sluicegate can use.",
        code="not_supported",
    )


async def _body(request: Request) -> object:
    return await read_json(request, app_state(request).settings.max_body_bytes)


@dialect_endpoint(DIALECT, llama_server_error)
async def tokenize(request: Request) -> Response:
    req = parse_tokenize(await _body(request))
    model = _model(request, req.model)
    engine = _engine(model)
    tokens = engine.tokenize(req.content, add_special=req.add_special, parse_special=req.parse_special)
    if tokens is None:
        raise _cannot(model, "tokenizer")
    pieces = engine.token_pieces(tokens) if req.with_pieces else None
    return JSONResponse(tokenize_body(tokens, pieces))


@dialect_endpoint(DIALECT, llama_server_error)
async def detokenize(request: Request) -> Response:
    name, tokens = parse_detokenize(await _body(request))
    model = _model(request, name)
    pieces = _engine(model).token_pieces(tokens)
    if pieces is None:
        raise _cannot(model, "tokenizer")
    return JSONResponse(detokenize_body(pieces))


@dialect_endpoint(DIALECT, llama_server_error)
async def apply_template(request: Request) -> Response:
    """The messages, in Chat Completions' shape, rendered by the model's chat template."""
    body = await _body(request)
    name = body.get("model") if isinstance(body, dict) else None
    model = _model(request, name if isinstance(name, str) else None)
    # `add_generation_prompt: false` after a user turn: the turns alone, as llama-server renders
    # them (after an assistant turn it continues that turn, as in Chat Completions).
    messages = body.get("messages") if isinstance(body, dict) else None
    bare = (
        isinstance(body, dict)
        and body.get("add_generation_prompt") is False
        and isinstance(messages, list)
        and bool(messages)
        and not (isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant")
    )
    if bare and isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "add_generation_prompt"}
    chat, _ = parse_chat_request(body)
    chat.model = model.id
    prompt = _engine(model).apply_template(chat, generation_prompt=not bare)
    if prompt is None:
        raise _cannot(model, "chat template")
    return JSONResponse({"prompt": prompt})


@dialect_endpoint(DIALECT, llama_server_error)
async def props(request: Request) -> Response:
    name = request.query_params.get("model")
    model = _model(request, name)
    engine = _engine(model)
    info = engine.info()
    path = info.details.get("path")
    return JSONResponse(
        props_body(
            model_id=model.id,
            model_path=path if isinstance(path, str) else None,
            n_ctx=info.context_length,
            slots=engine.default_concurrency(),
            chat_template=engine.chat_template(),
            vision=info.capabilities.vision,
            audio=info.capabilities.audio,
            loaded=model.loaded,
            build_info=f"sluicegate {__version__}",
            defaults=model.sampling,
        )
    )


@dialect_endpoint(DIALECT, llama_server_error)
async def slots(request: Request) -> Response:
    """The served model's slots, read-only (no save, restore or erase: docs/llama-server.md)."""
    if not app_state(request).settings.slots:  # llama-server's `--no-slots`
        raise SluicegateError(ErrorKind.NOT_IMPLEMENTED, "This server does not support slots endpoint.")
    model = _model(request, request.query_params.get("model"))
    total = sum(instance.engine.default_concurrency() for instance in model.instances)
    running = min(sum(instance.pending for instance in model.instances), total)
    return JSONResponse(slots_body(total, running, model.engine.info().context_length))


@dialect_endpoint(DIALECT, llama_server_error)
async def slot_action(request: Request) -> Response:
    """Save a slot's KV cache to a file in the slot save folder, restore it, or erase it; on
    the model's first loaded instance (a restore loads the model when none is)."""
    body = await _body(request) if request.query_params.get("action") != "erase" else None
    action = parse_slot_action(request.path_params["id_slot"], request.query_params.get("action"), body)
    model = _model(request, request.query_params.get("model"))
    if not model.loaded and action.kind == "restore" and isinstance(model.engine, SlotStore):
        await model.load()
    engine = _engine(model)
    if not isinstance(engine, SlotStore) or (model.loaded and engine.slot_count() is None):
        raise _cannot(model, "slots")  # another engine, or llamacpp without batching
    if engine.slot_count() is None:  # not loaded: every slot is empty
        if action.kind == "erase":
            return JSONResponse(slot_action_body(action, 0, 0, 0.0))
        raise SluicegateError(
            ErrorKind.INVALID_REQUEST, f"Slot {action.slot} is empty: model {model.id!r} is not loaded"
        )
    path = None
    if action.filename is not None:
        folder = slot_save_dir(app_state(request).settings)
        path = folder / action.filename
        if path.parent != folder:  # parse_slot_action refused any other name; never outside
            raise SluicegateError(ErrorKind.INVALID_REQUEST, "Invalid filename", param="filename")
    result = await engine.slot_action(action.slot, action.kind, path)
    return JSONResponse(slot_action_body(action, result.tokens, result.bytes, result.ms))


@dialect_endpoint(DIALECT, llama_server_error)
async def lora_adapters(request: Request) -> Response:
    """`GET`: the served model's LoRA adapters (`id`, `path`, `scale`); `POST`
    `[{"id", "scale"}]`: the scales requests without `lora` run with (one left out: 0)."""
    model = _model(request, request.query_params.get("model"))
    engines = [instance.engine for instance in model.instances]
    if not all(isinstance(engine, LoraStore) for engine in engines):
        if request.method != "POST":  # none to list, as llama-server lists a model without any
            return JSONResponse([])
        raise _cannot(model, "LoRA adapters")
    stores = [engine for engine in engines if isinstance(engine, LoraStore)]
    if request.method == "POST":
        body = await _body(request)
        if not isinstance(body, list):
            raise SluicegateError(ErrorKind.INVALID_REQUEST, "Request body must be an array")
        for store in stores:  # every instance serves requests alike
            store.set_lora_scales(body)
        return JSONResponse({"success": True})
    adapters = stores[0].lora_adapters()
    return JSONResponse(
        [
            {"id": i, "path": str(path), "scale": scale, "task_name": "", "prompt_prefix": ""}
            for i, (path, scale) in enumerate(adapters)
        ]
    )


ROUTES = [
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
    Route("/apply-template", apply_template, methods=["POST"]),
    Route("/props", props, methods=["GET"]),
    Route("/slots", slots, methods=["GET"]),
    Route("/slots/{id_slot}", slot_action, methods=["POST"]),
    Route("/lora-adapters", lora_adapters, methods=["GET", "POST"]),
]
