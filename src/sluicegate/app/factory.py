"""The app factory: wires routes, auth, errors, metrics and the model registry together."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sluicegate.app.auth import APIKeyMiddleware
from sluicegate.app.cors import CORSMiddleware
from sluicegate.app.dialects import dialect_routes
from sluicegate.app.keyring import KeyRing
from sluicegate.app.limits import KeyAccounting
from sluicegate.app.model_metrics import RegistryCollector
from sluicegate.app.playground import playground_routes
from sluicegate.app.routing import ExactRouter
from sluicegate.app.vertex import vertex_routes
from sluicegate.config import Settings, models_dir, store_path
from sluicegate.core.errors import ConfigError, ErrorInfo, ErrorKind
from sluicegate.core.frames import Frame
from sluicegate.core.pipeline import StreamLimits
from sluicegate.core.sealing import sealer_for
from sluicegate.dialects.base import DialectContext
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.registry import dialect_for, dialect_table
from sluicegate.dialects.responses.conversation import to_item as responses_item
from sluicegate.engines.downloads import Downloads
from sluicegate.engines.lifecycle import Lifecycle
from sluicegate.engines.load_caps import LoadCaps
from sluicegate.engines.lookup import add_table
from sluicegate.engines.model_files import discover
from sluicegate.engines.model_names import ModelNames
from sluicegate.engines.registry import Registry
from sluicegate.engines.upstream.routing import share_through_redis
from sluicegate.observe import tracing
from sluicegate.observe.metrics import METRICS
from sluicegate.observe.requests import ObserveMiddleware
from sluicegate.routes import admin_keys, audio, embeddings, rerank
from sluicegate.routes.common import JSONResponse, dialect_endpoint
from sluicegate.routes.models import get_model, list_models
from sluicegate.store.factory import open_store
from sluicegate.store.keys import Team
from sluicegate.store.keys_backends import open_key_store
from sluicegate.store.limits import open_limiter
from sluicegate.store.usage import Price, open_usage_store
from sluicegate.tools.catalog import ToolCatalog
from sluicegate.transport.sse import SERVER_SEND, frame_bytes
from sluicegate.turn.http import app_state
from sluicegate.turn.images import ImageSettings
from sluicegate.turn.state import Admission, AppState

log = logging.getLogger(__name__)

DEMO_MODEL = {"id": "scripted-demo", "engine": "scripted"}
STORE_PROBE_ID = "resp_store_probe"  # read, never written: a miss is a working store
STORE_PROBE_SECONDS = 10.0


def build_registry(settings: Settings) -> Registry:
    """The declared models (or the scripted demo), then every GGUF in the models directory."""
    registry = Registry()
    for table in settings.models or [DEMO_MODEL]:
        add_table(registry, table, settings.base_dir)
    add_model_files(registry, settings)
    registry.names = ModelNames.from_config(settings.default_model, settings.models)
    for model_id in {settings.default_model, *(target for _, target in registry.names.aliases)} - {None}:
        if model_id not in registry.models and not registry.sources:  # discovered ones come later
            raise ConfigError(f"[server].default_model or an alias names {model_id!r}, which is not served")
    return registry


def add_model_files(registry: Registry, settings: Settings) -> list[str]:
    """Serve the GGUF files in the models directory not served already (by id or by file).

    Runs at startup and after each download. A file that cannot be read as a model (half
    copied, not a GGUF) is logged and skipped: a scanned folder must not stop the server.
    """
    files = {  # declared GGUFs are served already: their engines know their (resolved) paths
        Path(path).resolve()
        for model in registry.models.values()
        if isinstance(path := model.engine.info().details.get("path"), str)
    }
    added: list[str] = []
    for table in discover(models_dir(settings)):
        if table["id"] in registry.models or Path(table["path"]).resolve() in files:
            continue
        try:
            add_table(registry, table, settings.base_dir)
        except ConfigError as exc:
            log.warning("skipping %s in the models folder: %s", table["path"], exc)
            continue
        added.append(table["id"])
    return added


def _log_added(model_ids: list[str]) -> None:
    if model_ids:
        log.info("now serving downloaded models: %s", ", ".join(model_ids))


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "models": list(app_state(request).registry.models)})


@dialect_endpoint("metrics", openai_error)
async def metrics(request: Request) -> Response:
    if not app_state(request).settings.metrics:  # llama-server's answer without `--metrics`
        info = ErrorInfo(ErrorKind.NOT_IMPLEMENTED, "This server does not support metrics endpoint.")
        return JSONResponse(llama_server_error(info, 501), status_code=501)
    # The process's start, as llama-server sends it (a scraper tells a restart from it).
    headers = {"Process-Start-Time-Unix": str(METRICS.started)}
    return Response(METRICS.render_bytes(), media_type=METRICS.content_type, headers=headers)


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
    spec = dialect_for(request.url.path)
    status = spec.status(info) if missing else exc.status_code
    return JSONResponse(spec.body(info, status), status_code=status)


def lost_run_frames(failed: dict[str, object], seq: int) -> list[bytes]:
    """The end of the log of a run lost with its process: the Responses `response.failed`."""
    data = orjson.dumps({"type": "response.failed", "sequence_number": seq, "response": failed})
    return [frame_bytes(Frame(data, "response.failed"))]


def asgi3(function: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A plain function that returns an awaitable, marked as a coroutine function: what
    uvicorn and Starlette's test client read (`asyncio.iscoroutinefunction`) to take an app for
    ASGI 3 rather than wrap it in their ASGI 2 adapter."""
    if sys.version_info >= (3, 12):
        return inspect.markcoroutinefunction(function)
    function._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]  # 3.11's marker
    return function


class SluicegateApp(Starlette):
    """Starlette, keeping the server's own `send` in the scope for stream bodies (`server_send`)."""

    @asgi3
    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:  # type: ignore[override]
        # What Starlette's `__call__` does, as a plain call handing on the middleware's
        # awaitable: no coroutine of this class, nor of Starlette's, that each step of a request
        # passes through and each open stream holds (bench/README.md, round twelve).
        scope["app"] = self
        scope[SERVER_SEND] = send
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        return self.middleware_stack(scope, receive, send)

    def build_middleware_stack(self) -> ASGIApp:
        # Without Starlette's error middleware, outermost: a layer (and a frame each stream
        # holds) per request whose one job, a plain 500 for an exception that escapes before
        # the response starts, `ObserveMiddleware` does (it sees the start already).
        stack = super().build_middleware_stack()
        if isinstance(stack, ServerErrorMiddleware) and stack.handler is None and not stack.debug:
            return stack.app
        return stack


class TurnRoutes:
    """The chat routes, dispatched before Starlette's exception middleware and router.

    A stream holds a frame in every layer it passed for as long as it lasts; those two are
    three frames (~1 KiB an open stream) and a regex match per request. A turn endpoint renders
    its own errors in its dialect's shape, so it needs neither. Any other path or method goes
    on as before (the router keeps the same routes, for its 405s)."""

    def __init__(self, app: ASGIApp, turns: Mapping[str, ASGIApp]) -> None:
        self.app = app
        self.turns = dict(turns)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and scope["method"] == "POST":
            turn = self.turns.get(scope["path"])
            if turn is not None:
                return turn(scope, receive, send)
        return self.app(scope, receive, send)


def start_tracing(settings: Settings) -> None:
    """This process's tracer, when `[tracing]` or `OTEL_TRACES_EXPORTER` asks for one."""
    if settings.tracing_exporter == "none":
        return
    config = tracing.TracingConfig(
        settings.tracing_exporter,
        settings.tracing_endpoint,
        settings.tracing_service_name,
        settings.tracing_sample_ratio,
    )
    try:
        tracing.configure(config)
    except ValueError as exc:
        raise ConfigError(f"[tracing]: {exc}") from exc


def create_app(settings: Settings) -> Starlette:
    registry = build_registry(settings)  # config errors surface here, before serving
    start_tracing(settings)
    limits = StreamLimits(
        heartbeat_seconds=settings.heartbeat_seconds,
        request_timeout_seconds=settings.request_timeout_seconds or None,
        idle_timeout_seconds=settings.idle_timeout_seconds or None,
    )

    lifecycle = Lifecycle(
        registry,
        jit_ttl=settings.jit_ttl_seconds,
        auto_evict=settings.jit_auto_evict,
        interval=settings.reaper_interval_seconds,
        caps=LoadCaps.from_settings(settings.max_instances, settings.max_loaded_model_bytes),
    )
    tools = ToolCatalog.from_settings(settings)  # mcp.json and plugin errors surface here too
    store = open_store(settings.store_backend, path=store_path(settings), url=settings.store_url)
    # Upstream replicas' prefix-affinity tables are shared where the state is (Redis), if it is.
    share_through_redis(settings.store_url if settings.store_backend == "redis" else None)
    # Runtime keys live beside the responses; the admin key turns them on.
    keyring = KeyRing(
        open_key_store(settings.store_backend, path=store_path(settings), url=settings.store_url)
        if settings.admin_key
        else None
    )
    usage = open_usage_store(settings.store_backend, path=store_path(settings), url=settings.store_url)
    accounting = (
        KeyAccounting(
            open_limiter(settings.store_backend, url=settings.store_url),
            usage,
            {model: Price(**entry) for model, entry in settings.prices.items()},
            settings.limits_on_store_failure,
            {name: Team.from_config(name, entry) for name, entry in settings.teams.items()},
        )
        if settings.admin_key
        else None
    )
    downloads = Downloads(
        models_dir(settings), on_downloaded=lambda _path: _log_added(add_model_files(registry, settings))
    )
    sealer = sealer_for(settings.data_dir)  # the key that seals compactions and reasoning for clients
    state = AppState(
        settings,
        registry,
        limits,
        Admission(settings.max_concurrent_requests),
        store,
        downloads,
        tools=tools,
        sealer=sealer,
        images=ImageSettings.from_settings(settings),
        keys=keyring.store,
        usage=usage,
        keys_changed=keyring.refresh,
    )

    async def purge_expired_forever() -> None:
        while True:
            try:
                purged = await store.purge_expired()
                if purged:
                    log.info("purged %d expired responses", purged)
            except Exception:
                log.exception("purging expired responses failed")
            await asyncio.sleep(3600)

    async def probe_store_forever() -> None:
        """`sluicegate_store_up`: 1 while a read of the store works, 0 while it fails (the
        overview page and alerts read it); one cheap read every STORE_PROBE_SECONDS."""
        key = METRICS.key("sluicegate_store_up")
        while True:
            try:
                await store.get(STORE_PROBE_ID, events=False)
                METRICS.gauges[key] = 1.0
            except Exception as exc:
                if METRICS.gauges[key]:
                    log.warning("the store stopped answering: %s", exc)
                METRICS.gauges[key] = 0.0
            await asyncio.sleep(STORE_PROBE_SECONDS)

    def cancel_local(scope: str, response_id: str) -> None:
        """A client asked (on any replica) to cancel a run this process owns."""
        live = state.live_turn(response_id, scope)
        if live is not None and live.background:
            live.cancel("cancelled")

    store.on_cancel = cancel_local
    store.lost_run_frames = lost_run_frames
    store.read_item = responses_item  # stored items not in our own form: older records, response output

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        METRICS.add_live(collector := RegistryCollector(registry))
        await store.start()  # runs left in flight by a crash are marked failed here
        await keyring.start()
        purger = asyncio.create_task(purge_expired_forever())
        prober = asyncio.create_task(probe_store_forever())
        reaper = asyncio.create_task(lifecycle.run())
        await tools.start()  # discovery runs in the background; a dead server is only logged
        await registry.start()
        try:
            yield
        finally:
            purger.cancel()
            prober.cancel()
            reaper.cancel()
            downloads.close()
            for live in list(state.live.values()):
                live.cancel("server_shutdown")
                await asyncio.gather(live.wait(), return_exceptions=True)
            await registry.aclose()
            await tools.aclose()
            await store.aclose()
            await keyring.aclose()
            if accounting is not None:
                await accounting.limiter.aclose()
            await usage.aclose()
            METRICS.remove_live(collector)
            tracing.shutdown()  # export the spans still pending

    # Every registered dialect's routes (`app/dialects.py`): its chat routes, each served by the
    # one turn runner, and its others. Its package declares them; nothing here names one.
    dialects = dialect_table()
    context = DialectContext(settings, sealer, tools.plugin_ids, lambda: registry.models)
    served = dialect_routes(dialects, context)
    routes = [
        *served.routes,
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),  # llama-server answers both
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
        *embeddings.ROUTES,
        Route("/embeddings", embeddings.create_embeddings, methods=["POST"]),  # without `/v1`
        *rerank.ROUTES,
        *audio.ROUTES,
        *admin_keys.ROUTES,
        *playground_routes(),  # `/` and `/playground/*`: open, no API key (the page holds no data)
    ]
    routes += vertex_routes(os.environ, routes)  # when Vertex AI started the server (app/vertex.py)
    observe = Middleware(
        ObserveMiddleware,
        log_prompts=settings.log_prompts,
        # A path's API, looked up once per path (the registry walks its prefixes); bounded, as
        # paths are the clients' to choose.
        dialect_of=functools.lru_cache(maxsize=4096)(dialects.dialect_name),
    )  # metrics, access log
    layers = [observe]
    # Preflights are answered before the key check: a browser sends no key on one. Each layer
    # only when configured: without origins or keys it passes every request on, a call a
    # request for nothing.
    if settings.cors_origins:
        layers.append(Middleware(CORSMiddleware, origins=settings.cors_origins))
    if settings.api_keys or settings.admin_key:  # before routing: every path but the open ones
        layers.append(
            Middleware(
                APIKeyMiddleware,
                api_keys=settings.api_keys,
                admin_key=settings.admin_key,
                keyring=keyring,
                accounting=accounting,
            )
        )
    layers.append(Middleware(TurnRoutes, turns=served.turns))
    app = SluicegateApp(
        routes=routes,
        middleware=layers,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    app.router = ExactRouter(routes, lifespan=lifespan)  # the same routes, found by path first
    app.state.sluicegate = state
    return app
