"""Models by id: finding engines, loading them just in time, and admitting requests.

`Model` wraps one engine with what every engine needs and none should re-implement: a bounded
queue in front of a concurrency limit (503 when full, never a hang), just-in-time loading
whose progress becomes load events for the request that caused it, and metrics. Each instance
also keeps what its lifecycle (idle TTL, auto-evict: `engines/lifecycle.py`) decides on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from sluicegate.core.errors import EngineFailure, ErrorKind, SluicegateError
from sluicegate.core.events import (
    LoadFinished,
    LoadProgress,
    LoadStarted,
    RawEvent,
    TextDelta,
    ToolCallDelta,
)
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import ConfigError, Discovery, Engine
from sluicegate.metrics import METRICS

log = logging.getLogger(__name__)

ENGINE_GROUP = "sluicegate.engines"


def engine_class(kind: str) -> type[Engine]:
    """Look an engine up by its config name in the `sluicegate.engines` entry points."""
    for ep in entry_points(group=ENGINE_GROUP):
        if ep.name == kind:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Engine)):
                raise ConfigError(f"entry point {ep.value!r} is not a sluicegate Engine")
            return cls
    known = sorted(ep.name for ep in entry_points(group=ENGINE_GROUP))
    raise ConfigError(f"unknown engine {kind!r}; installed engines: {', '.join(known)}")


class InstanceHooks:
    """What an instance tells the lifecycle manager; this base does nothing (no lifecycle)."""

    async def before_jit_load(self, instance: Instance) -> None:
        """A request is about to load `instance` just in time."""

    def went_idle(self, instance: Instance) -> None:
        """`instance` has no request running or queued any more."""

    def check_load(self, model: Model, instance: Instance | None) -> None:
        """`instance` (None: a new instance of `model`) is about to be loaded: raise a
        `SluicegateError` now if an operator's cap forbids it (`engines/caps.py`)."""

    async def before_load(self, instance: Instance) -> None:
        """`instance` is loading now: make room for it, or raise a `SluicegateError`."""


NO_HOOKS = InstanceHooks()


@dataclass(slots=True)
class Generation:
    """An admitted request: who serves it, and its raw events (waiting for a slot comes first)."""

    instance_id: str
    events: AsyncIterator[RawEvent]


class _Admitted:
    """An instance's event stream, counted as waiting from admission (not from its first
    iteration, so a burst cannot overrun `max_queue`) until it starts, is closed, or is dropped
    unstarted (a client gone before its stream began)."""

    __slots__ = ("_gen", "_instance", "_started")

    def __init__(self, instance: Instance, request: ChatRequest) -> None:
        self._instance = instance
        self._gen = instance._run(request)
        self._started = False

    def __aiter__(self) -> _Admitted:
        return self

    def __anext__(self) -> Awaitable[RawEvent]:
        # The generator's own awaitable, not a coroutine around it: one frame less per event.
        self._started = True  # from here on `_run` owns the waiting count
        return self._gen.__anext__()

    def _forget(self) -> None:
        if not self._started:
            self._started = True
            self._instance._waiting -= 1
            self._instance._settle()

    async def aclose(self) -> None:
        self._forget()
        await self._gen.aclose()

    def __del__(self) -> None:
        self._forget()


class Instance:
    """One loaded (or loadable) copy of a model's engine, with its own slots and load state."""

    def __init__(self, engine: Engine, instance_id: str, *, max_concurrency: int, max_queue: int) -> None:
        self.engine = engine
        self.id = engine.model_id  # the model id, for metrics labels
        self.instance_id = instance_id
        self.config: dict[str, Any] = {}  # load settings asked for (e.g. context_length)
        self.max_queue = max_queue
        self._slots = asyncio.Semaphore(max_concurrency)
        self._waiting = 0
        self._active = 0
        self.loaded = not engine.needs_load
        self._loading: asyncio.Task[float] | None = None
        # Lifecycle: who loaded it, how long it may sit idle, since when it has been.
        self.jit = False  # loaded just in time by a request (not by the models API or CLI)
        self.ttl: float | None = None  # idle seconds before unloading, as a request or load set it
        self.last_used = time.monotonic()
        self.evict_when_idle = False  # auto-evict wants it gone as soon as nothing uses it
        self.hooks = NO_HOOKS
        self._lifecycle = asyncio.Lock()  # a load and an unload of one engine never overlap
        self._deltas_key = METRICS.key("sluicegate_engine_deltas_total", model=self.id)

    @property
    def busy(self) -> bool:
        return self._active > 0 or self._waiting > 0

    @property
    def pending(self) -> int:
        """Requests running or waiting here: the routing weight."""
        return self._active + self._waiting

    @property
    def full(self) -> bool:
        return self._waiting >= self.max_queue and self._slots.locked()

    @property
    def loading(self) -> bool:
        return self._loading is not None

    def generation(self, request: ChatRequest) -> Generation:
        self._waiting += 1
        self.last_used = time.monotonic()  # a request arriving resets the idle clock
        return Generation(self.instance_id, _Admitted(self, request))

    def _settle(self) -> None:
        """A request left: restart the idle clock, and say so when nothing else is here."""
        self.last_used = time.monotonic()
        if not self.busy:
            self.hooks.went_idle(self)

    async def _run(self, request: ChatRequest) -> AsyncGenerator[RawEvent, None]:
        try:
            await self._slots.acquire()
        except BaseException:  # gone while queued
            self._waiting -= 1
            self._settle()
            raise
        self._waiting -= 1
        self._active += 1
        METRICS.add_gauge("sluicegate_generations_active", 1, model=self.id)
        engine_events: AsyncIterator[RawEvent] | None = None
        try:
            if not self.loaded:
                async for load_event in self._ensure_loaded(jit=True):
                    yield load_event
            if (ttl := request.extra.get("ttl")) is not None:
                self.ttl = float(ttl)  # the dialect checked it; it governs the instance it used
            engine_events = self.engine.generate(request)
            counters, key = METRICS.counters, self._deltas_key  # live: watch it stop on cancel
            async for event in engine_events:
                if type(event) is TextDelta or type(event) is ToolCallDelta:
                    counters[key] += 1
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            METRICS.inc("sluicegate_generations_cancelled_total", model=self.id)
            raise
        finally:
            if engine_events is not None:
                aclose = getattr(engine_events, "aclose", None)
                if aclose is not None:
                    await aclose()
            self._active -= 1
            METRICS.add_gauge("sluicegate_generations_active", -1, model=self.id)
            self._slots.release()
            self._settle()

    async def _ensure_loaded(self, *, jit: bool) -> AsyncIterator[RawEvent]:
        """Load the model; only the request that starts the load sees its events."""
        if self._loading is not None:  # someone else is loading: wait quietly
            try:
                await asyncio.shield(self._loading)
            except Exception as exc:
                raise EngineFailure(
                    f"loading model {self.instance_id!r} failed: {exc}", code="model_load_failed"
                ) from exc
            return
        progress: asyncio.Queue[float | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_progress(value: float) -> None:  # may be called from a loader thread
            loop.call_soon_threadsafe(progress.put_nowait, value)

        async def load() -> float:
            started = time.perf_counter()
            try:
                if jit:
                    await self.hooks.before_jit_load(self)  # auto-evict makes room first
                await self.hooks.before_load(self)  # then the memory cap
                async with self._lifecycle:
                    await self.engine.load(on_progress)
                self.loaded = True
                self.last_used = time.monotonic()
            except BaseException:
                self.jit = False
                raise
            finally:
                loop.call_soon_threadsafe(progress.put_nowait, None)
            return time.perf_counter() - started

        self.jit = jit  # from now on, so a JIT load elsewhere can see this one coming
        # The load outlives a requester that goes away: the next request should not start over.
        self._loading = loading = asyncio.ensure_future(load())
        loading.add_done_callback(self._load_done)
        yield LoadStarted(self.instance_id)
        while (value := await progress.get()) is not None:
            yield LoadProgress(min(max(value, 0.0), 1.0))
        try:
            seconds = await asyncio.shield(loading)
        except Exception as exc:
            if isinstance(exc, SluicegateError) and not jit:
                raise  # a cap refused an explicit load: the models API answers it as it is
            raise EngineFailure(
                f"loading model {self.instance_id!r} failed: {exc}", code="model_load_failed"
            ) from exc
        yield LoadFinished(seconds)

    def _load_done(self, task: asyncio.Task[float]) -> None:
        self._loading = None
        if not task.cancelled() and task.exception() is not None:
            log.error("loading model %s failed: %s", self.id, task.exception())

    async def load_now(self, ttl: float | None = None) -> float:
        """Explicit load (models API, CLI); returns the load time in seconds (0 if loaded).

        An explicitly loaded instance is never auto-evicted and has no idle TTL unless `ttl`
        gives it one.
        """
        seconds = 0.0
        if not self.loaded:
            async for event in self._ensure_loaded(jit=False):
                if isinstance(event, LoadFinished):
                    seconds = event.seconds
        self.jit, self.ttl, self.evict_when_idle = False, ttl, False
        return seconds

    async def unload(self) -> None:
        if self.engine.needs_load and self.loaded:
            self.loaded = False  # first: a request arriving now loads again (after the lock)
            async with self._lifecycle:
                await self.engine.unload()
        self.config = {}  # a later (JIT) load starts from the model's defaults
        self.jit, self.ttl, self.evict_when_idle = False, None, False


class Model:
    """A configured model: one or more instances of its engine behind one id.

    Requests go to the least busy loaded instance, or just-in-time load the first one. Another
    instance can be loaded explicitly (LM Studio's `:2` ids); instances beyond the first are
    built with `factory`, so each has an engine of its own.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        max_concurrency: int,
        max_queue: int,
        factory: Callable[[], Engine] | None = None,
        ttl: float | None = None,
    ) -> None:
        self.id = engine.model_id
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.factory = factory
        self.ttl = ttl  # idle TTL of its JIT loads (None: the server's `jit_ttl_seconds`)
        self._hooks = NO_HOOKS
        self.instances = [
            Instance(engine, engine.model_id, max_concurrency=max_concurrency, max_queue=max_queue)
        ]
        for _ in range(engine.parallel - 1):
            self.add_instance()
        self.fixed = len(self.instances)  # built up front: unloading keeps them, loadable

    @property
    def hooks(self) -> InstanceHooks:
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: InstanceHooks) -> None:
        self._hooks = hooks
        for instance in self.instances:
            instance.hooks = hooks

    @property
    def engine(self) -> Engine:
        return self.instances[0].engine

    @property
    def instance_id(self) -> str:
        return self.instances[0].instance_id

    @property
    def loaded(self) -> bool:
        return any(i.loaded for i in self.instances)

    @property
    def busy(self) -> bool:
        return any(i.busy for i in self.instances)

    def loaded_instances(self) -> list[Instance]:
        return [i for i in self.instances if i.loaded]

    def pick(self) -> Instance:
        """The least busy instance; among equals a loaded one (an idle unloaded one beats
        queueing: that is how `parallel` instances load just in time)."""
        return min(self.instances, key=lambda i: (i.pending, not i.loaded))

    def open(self, request: ChatRequest) -> Generation:
        """Admit a request or refuse it at once; nothing here waits."""
        instance = self.pick()
        if instance.full:
            raise SluicegateError(
                ErrorKind.OVERLOADED,
                f"model {self.id!r} has {instance._waiting} requests queued (max_queue); retry later",
                code="server_overloaded",
            )
        instance.engine.check(request)
        if not instance.loaded and not instance.loading:
            self._hooks.check_load(self, instance)  # a JIT load a cap forbids: refused before it starts
        return instance.generation(request)

    def add_instance(self) -> Instance:
        """Another instance with an engine of its own, numbered like LM Studio's (`id:2`)."""
        if self.factory is None:
            raise SluicegateError(
                ErrorKind.INVALID_REQUEST, f"model {self.id!r} cannot run a second instance", param="model"
            )
        number = len(self.instances) + 1
        while self.instance(f"{self.id}:{number}") is not None:
            number += 1
        instance = Instance(
            self.factory(),
            f"{self.id}:{number}",
            max_concurrency=self.max_concurrency,
            max_queue=self.max_queue,
        )
        instance.hooks = self._hooks
        self.instances.append(instance)
        return instance

    def instance(self, instance_id: str) -> Instance | None:
        return next((i for i in self.instances if i.instance_id == instance_id), None)

    async def load(
        self,
        *,
        new_instance: bool = False,
        config: dict[str, Any] | None = None,
        ttl: float | None = None,
    ) -> tuple[Instance, float]:
        """Load the first instance, or (when one is loaded and asked for) another one."""
        target = self.instances[0]
        if new_instance and target.loaded:
            spare = next((i for i in self.instances if not i.loaded), None)
            if spare is None:
                self._hooks.check_load(self, None)  # caps: instances per model, memory
            target = spare or self.add_instance()
        if not target.loaded and not target.loading:
            self._hooks.check_load(self, target)
        if config:
            target.config.update(config)
        return target, await target.load_now(ttl)

    async def unload(self, instance_id: str | None = None) -> list[str]:
        """Unload one instance (or all); extra instances go away, the first stays loadable."""
        targets = [i for i in self.instances if instance_id in (None, i.instance_id)]
        for target in targets:
            await target.unload()
            if target not in self.instances[: self.fixed]:
                self.instances.remove(target)
        return [t.instance_id for t in targets]


@dataclass(slots=True)
class _Source:
    """A discovery and what its models get: the table's limits, and the ids it added."""

    discovery: Discovery
    max_concurrency: int
    max_queue: int
    ids: set[str]


DISCOVERY_FIRST_WAIT = 5.0  # seconds startup waits for each discovery's first answer
DISCOVERY_RETRY = 5.0  # seconds between attempts while a source cannot be reached


class Registry:
    def __init__(self) -> None:
        self.models: dict[str, Model] = {}
        self._hooks = NO_HOOKS
        self.sources: list[_Source] = []
        self._refreshers: list[asyncio.Task[None]] = []

    def add(self, model: Model) -> None:
        if model.id in self.models:
            raise ConfigError(f"model id {model.id!r} is declared twice")
        model.hooks = self._hooks
        self.models[model.id] = model

    def set_hooks(self, hooks: InstanceHooks) -> None:
        """Let a lifecycle manager hear from every instance, present and future."""
        self._hooks = hooks
        for model in self.models.values():
            model.hooks = hooks

    def find_instance(self, instance_id: str) -> tuple[Model, Instance] | None:
        for model in self.models.values():
            if (instance := model.instance(instance_id)) is not None:
                return model, instance
        return None

    def get(self, model_id: str) -> Model:
        model = self.models.get(model_id)
        if model is None:
            raise SluicegateError(
                ErrorKind.NOT_FOUND,
                f"The model `{model_id}` does not exist. "
                f"Available models: {', '.join(self.models) or 'none'}.",
                param="model",
                code="model_not_found",
            )
        return model

    async def start(self) -> None:
        """Let every engine start its background work (health checks), and discover the
        models of discovery tables: once now (bounded), then in the background."""
        for model in self.models.values():
            for instance in model.instances:
                await instance.engine.start()
        for source in self.sources:
            await source.discovery.start()
            try:
                found = await asyncio.wait_for(self.discover(source), DISCOVERY_FIRST_WAIT)
            except TimeoutError:
                found = False
            loop = asyncio.get_running_loop()
            self._refreshers.append(loop.create_task(self._refresh_forever(source, found)))

    async def discover(self, source: _Source) -> bool:
        """Add the models the source lists now, drop idle ones it no longer lists."""
        try:
            engines = await source.discovery.engines()
        except Exception as exc:
            log.warning("model discovery failed (%s); retrying in the background", exc)
            return False
        listed = set()
        for engine in engines:
            listed.add(engine.model_id)
            if engine.model_id in self.models:
                continue  # a configured model of that id wins; a known one stays as it is
            self.models[engine.model_id] = Model(
                engine, max_concurrency=source.max_concurrency, max_queue=source.max_queue
            )
            source.ids.add(engine.model_id)
            log.info("discovered model %s", engine.model_id)
        for model_id in sorted(source.ids - listed):
            model = self.models.get(model_id)
            if model is not None and not model.busy:
                del self.models[model_id]
                source.ids.discard(model_id)
                log.info("model %s is no longer listed upstream; removed", model_id)
        return True

    async def _refresh_forever(self, source: _Source, found: bool) -> None:
        while True:
            interval = source.discovery.interval
            await asyncio.sleep(interval if found else min(interval, DISCOVERY_RETRY))
            found = await self.discover(source)

    async def aclose(self) -> None:
        for task in self._refreshers:
            task.cancel()
        await asyncio.gather(*self._refreshers, return_exceptions=True)
        for source in self.sources:
            await source.discovery.aclose()
        for model in self.models.values():
            try:
                for instance in model.instances:
                    await instance.engine.aclose()
            except Exception:
                log.exception("closing model %s failed", model.id)


def _limits(table: dict[str, Any], default_concurrency: int) -> tuple[int, int]:
    max_concurrency = table.get("max_concurrency", default_concurrency)
    max_queue = table.get("max_queue", 256)
    for key, value in (("max_concurrency", max_concurrency), ("max_queue", max_queue)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (key == "max_concurrency"):
            raise ConfigError(f"model {table.get('id')!r}: `{key}` must be a non-negative integer")
    return max_concurrency, max_queue


def add_table(registry: Registry, table: dict[str, Any], base_dir: Path) -> None:
    """A `[[models]]` table → a model in `registry`, or a discovery source of models."""
    if isinstance(table.get("engine"), str):
        own = {k: v for k, v in table.items() if k not in ("max_concurrency", "max_queue", "ttl")}
        cls = engine_class(table["engine"])
        discovery = cls.discovery(own, base_dir)
        if discovery is not None:
            registry.sources.append(_Source(discovery, *_limits(table, cls.default_max_concurrency), set()))
            return
    registry.add(build_model(table, base_dir))


def build_model(table: dict[str, Any], base_dir: Path) -> Model:
    """A `[[models]]` table → a `Model`; the engine validates its own keys."""
    for key in ("id", "engine"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ConfigError(f"every [[models]] table needs a string `{key}`")
    cls = engine_class(table["engine"])
    own = {k: v for k, v in table.items() if k not in ("max_concurrency", "max_queue", "ttl")}
    engine = cls.from_config(own, base_dir)
    max_concurrency, max_queue = _limits(table, cls.default_max_concurrency)
    ttl = table.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0):
        raise ConfigError(f"model {table['id']!r}: `ttl` must be a non-negative number of seconds")
    return Model(
        engine,
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        factory=lambda: cls.from_config(own, base_dir),
        ttl=None if ttl is None else float(ttl),
    )
