"""The app factory: wires routes, auth, errors, metrics and the model registry together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sluicegate.config import Settings, store_path
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.pipeline import StreamLimits
from sluicegate.dialects.lmstudio import lmstudio_error
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.registry import Registry, add_table
from sluicegate.metrics import METRICS
from sluicegate.routes.chat_completions import chat_completions
from sluicegate.routes.common import (
    Admission,
    AppState,
    JSONResponse,
    app_state,
    dialect_endpoint,
)
from sluicegate.routes.lmstudio import lmstudio_chat
from sluicegate.routes.lmstudio_models import (
    download_model,
    download_status,
    list_lmstudio_models,
    load_model,
    unload_model,
)
from sluicegate.routes.models import get_model, list_models
from sluicegate.routes.responses import (
    cancel_response,
    create_response,
    delete_response,
    list_input_items,
    retrieve_response,
)
from sluicegate.store.sqlite import SQLiteStore

log = logging.getLogger(__name__)

DEMO_MODEL = {"id": "scripted-demo", "engine": "scripted"}


def build_registry(settings: Settings) -> Registry:
    registry = Registry()
    for table in settings.models or [DEMO_MODEL]:
        add_table(registry, table, settings.base_dir)
    return registry


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "models": list(app_state(request).registry.models)})


@dialect_endpoint("metrics", openai_error)
async def metrics(request: Request) -> Response:
    return PlainTextResponse(METRICS.render(), media_type="text/plain; version=0.0.4")


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and wrong methods, in the error shape of the API the path belongs to."""
    assert isinstance(exc, HTTPException)
    missing = exc.status_code == 404
    kind = ErrorKind.NOT_FOUND if missing else ErrorKind.INVALID_REQUEST
    if missing:
        message = f"Unknown route: {request.method} {request.url.path}"
    else:
        message = f"{request.method} is not allowed on {request.url.path}"
    info = ErrorInfo(kind, message, code="unknown_route" if missing else "method_not_allowed")
    render = lmstudio_error if request.url.path.startswith("/api/") else openai_error
    return JSONResponse(render(info), status_code=exc.status_code)


def create_app(settings: Settings) -> Starlette:
    registry = build_registry(settings)  # config errors surface here, before serving
    limits = StreamLimits(
        heartbeat_seconds=settings.heartbeat_seconds,
        request_timeout_seconds=settings.request_timeout_seconds or None,
        idle_timeout_seconds=settings.idle_timeout_seconds or None,
    )

    store = SQLiteStore(store_path(settings))
    state = AppState(settings, registry, limits, Admission(settings.max_concurrent_requests), store)

    async def purge_expired_forever() -> None:
        while True:
            try:
                purged = await store.purge_expired()
                if purged:
                    log.info("purged %d expired responses", purged)
            except Exception:
                log.exception("purging expired responses failed")
            await asyncio.sleep(3600)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        purger = asyncio.create_task(purge_expired_forever())
        await registry.start()
        try:
            yield
        finally:
            purger.cancel()
            for run in list(state.runs.values()):
                run.cancel("server_shutdown")
                await asyncio.gather(run.wait(), return_exceptions=True)
            await registry.aclose()
            await store.aclose()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
        Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
        Route("/api/v1/chat", lmstudio_chat, methods=["POST"]),
        Route("/api/v1/models", list_lmstudio_models, methods=["GET"]),
        Route("/api/v1/models/load", load_model, methods=["POST"]),
        Route("/api/v1/models/unload", unload_model, methods=["POST"]),
        Route("/api/v1/models/download", download_model, methods=["POST"]),
        Route("/api/v1/models/download/status/{job_id}", download_status, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    app.state.sluicegate = state
    return app
