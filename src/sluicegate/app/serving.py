"""Running the server: one process, or `workers` processes on one port.

One process runs one event loop on one core. A gateway in front of upstream servers spends
its CPU in Python per request and per token, so past one core it needs more processes:
`workers = N` starts N of them behind one listening socket (uvicorn's supervisor, which
restarts a worker that dies). They are replicas of each other, as servers behind a load
balancer are: what must be shared (stored responses, background runs and their cancels,
conversations) is shared through the Redis store, and `/metrics` adds up every worker's
counts through prometheus-client's multiprocess mode. A model that loads weights into the
process (llama.cpp) would be loaded once per worker, so those stay with one process.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import os
import pickle
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette

from sluicegate.app import uvicorn_package
from sluicegate.app.factory import create_app
from sluicegate.config import Settings
from sluicegate.core.errors import ConfigError
from sluicegate.engines.registry import Registry
from sluicegate.observe.logs import configure_logging
from sluicegate.observe.metrics import MULTIPROCESS_DIR_ENV, forget_dead_processes, multiprocess_dir

if TYPE_CHECKING:
    import uvicorn

WORKER_SETTINGS_ENV: Final = "SLUICEGATE_WORKER_SETTINGS"  # the parent's settings, for its workers


# Young collections every 2,000 net allocations, not CPython's 700: a request start's objects
# live until its answer, so at 700 a burst's collections walk the requests still in flight and
# move them to the middle generation, which is walked again (bench/README, round fourteen).
YOUNG_THRESHOLD: Final = 2000


def settle_garbage_collector() -> None:
    """Keep collections from walking what lives as long as the process, or a request.

    Everything built at startup (the app, its routes, the imported modules, the lifespan's
    engines and pools) is frozen: the older-generation collections that a stream of requests
    triggers no longer traverse it, and those pauses were the tail of time to first token under
    a burst of requests. Young collections run every `YOUNG_THRESHOLD` allocations: at 2,000,
    1,000-2,000 one-token starts at 16 concurrent cost ~4-5 µs of collection each instead of
    ~17-18, and a held stream's traced memory did not grow; 20,000 held more RSS per open
    stream (bench/README, round four).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def settled_server() -> type[uvicorn.Server]:
    """uvicorn's `Server`, settling the collector once its startup is done: the app's lifespan
    (the store, the registry's engines and their pools) and the modules uvicorn loads then
    (its protocols) are built by then, and they live as long as the process too."""
    from uvicorn.server import Server

    class SettledServer(Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)  # exits the process when the lifespan fails
            settle_garbage_collector()

    return SettledServer


def check_workers(settings: Settings, registry: Registry) -> None:
    """Refuse `workers > 1` where the processes could not be replicas of each other."""
    if settings.workers <= 1:
        return
    if settings.store_backend != "redis":
        raise ConfigError(
            '[server].workers > 1 needs [store] backend = "redis": the workers are replicas and '
            "share stored responses, background runs and their cancels through it (a SQLite file "
            "belongs to one server process)"
        )
    if len(hosts(settings)) > 1:
        raise ConfigError("[server].workers > 1 listens on one host; list several hosts with workers = 1")
    local = sorted(model.id for model in registry.models.values() if model.engine.holds_weights)
    if local:
        raise ConfigError(
            f"[server].workers > 1 serves upstream and scripted models only; {', '.join(local)} "
            "would load its weights once per worker. Run local models with workers = 1 (the "
            "llamacpp engine batches concurrent requests itself), and a gateway in front of it "
            "with more workers."
        )


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    uvicorn_package.install()  # before any of uvicorn's modules: not its command line
    from sluicegate.app.http_protocol import JSONHttpToolsProtocol
    from sluicegate.app.websocket_protocol import websocket_protocol

    return {
        # Unparseable requests get a JSON 400, not uvicorn's plain text; a request head that takes
        # too long (a client dribbling it, or sending nothing) is cut off. A partial of the class
        # (not a class made here) so that worker processes can unpickle it.
        "http": functools.partial(JSONHttpToolsProtocol, header_timeout=settings.header_timeout_seconds),
        # A text message that is not UTF-8 closes with 1007 and one log line, not a traceback.
        "ws": websocket_protocol(),
        "timeout_keep_alive": settings.keep_alive_seconds,
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 5,
        "log_config": None,  # ours (configure_logging), text or JSON
        "access_log": False,  # the one access line per request comes from sluicegate.observe.requests
        # uvicorn's X-Forwarded-For/-Proto rewriting of `client` and `scheme`: nothing here reads
        # either, and it is one more layer every request (and each of its steps) goes through.
        "proxy_headers": False,
    }


def hosts(settings: Settings) -> list[str]:
    """The addresses to listen on: `host` may list several, comma-separated (llama-server's
    `--host 127.0.0.1,::1`)."""
    return [h.strip() for h in settings.host.split(",") if h.strip()] or ["127.0.0.1"]


def address_list(settings: Settings) -> str:
    """`http://host:port` of each address, for the startup line."""
    return ", ".join(f"http://{f'[{h}]' if ':' in h else h}:{settings.port}" for h in hosts(settings))


def serve_one(app: Starlette, settings: Settings) -> None:
    """One process: uvicorn's `Server` itself, as `uvicorn.run` runs it without reload or
    workers (not `uvicorn.run`, whose module is the `uvicorn` command: uvicorn_package.py)."""
    uvicorn_package.install()
    from uvicorn.config import STARTUP_FAILURE, Config

    Server = settled_server()
    options, addresses = uvicorn_options(settings), hosts(settings)
    if len(addresses) == 1:
        server = Server(Config(app, **{**options, "host": addresses[0]}))
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
        if not server.started:
            raise SystemExit(STARTUP_FAILURE)
        return
    # One server on a socket per address (uvicorn binds one host itself).
    sockets = [Config(app, **{**options, "host": host}).bind_socket() for host in addresses]
    Server(Config(app, **options)).run(sockets=sockets)


def serve_workers(settings: Settings) -> None:
    """`settings.workers` processes on one socket, each building its app from these settings."""
    import uvicorn

    os.environ[WORKER_SETTINGS_ENV] = base64.b64encode(pickle.dumps(settings)).decode("ascii")
    with _metrics_dir():
        uvicorn.run(
            "sluicegate.app.serving:worker_app",
            factory=True,
            workers=settings.workers,
            **uvicorn_options(settings),
        )


def worker_app() -> Starlette:
    """The app of one worker (uvicorn calls this in each new process)."""
    encoded = os.environ.get(WORKER_SETTINGS_ENV)
    if not encoded:
        raise RuntimeError(f"{WORKER_SETTINGS_ENV} is not set: workers are started by `sluicegate serve`")
    settings: Settings = pickle.loads(base64.b64decode(encoded))  # written by our own parent process
    configure_logging(settings.log_level, settings.log_format)
    metrics_dir = multiprocess_dir()
    if metrics_dir is not None:  # this may be the replacement of a worker that was killed
        forget_dead_processes(metrics_dir)
    app = create_app(settings)
    settle_garbage_collector()
    return app


@contextlib.contextmanager
def _metrics_dir() -> Iterator[None]:
    """Where the workers' metric values live so that `/metrics` sums them: the operator's
    `PROMETHEUS_MULTIPROC_DIR`, else a fresh directory removed when the server stops."""
    if multiprocess_dir() is not None:
        yield
        return
    path = tempfile.mkdtemp(prefix="sluicegate-metrics-")
    os.environ[MULTIPROCESS_DIR_ENV] = path
    try:
        yield
    finally:
        del os.environ[MULTIPROCESS_DIR_ENV]
        shutil.rmtree(path, ignore_errors=True)
