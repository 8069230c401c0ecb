"""Models by id: finding engines, loading them just in time, and admitting requests.

`Model` wraps one engine with what every engine needs and none should re-implement: a bounded
queue in front of a concurrency limit (503 when full, never a hang), just-in-time loading
whose progress becomes load events for the request that caused it, and metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import (
    LoadFinished,
    LoadProgress,
    LoadStarted,
    RawEvent,
    TextDelta,
    ToolCallDelta,
)
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import ConfigError, Engine
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


@dataclass(slots=True)
class Generation:
    """An admitted request: who serves it, and its raw events (waiting for a slot comes first)."""

    instance_id: str
    events: AsyncIterator[RawEvent]


class Model:
    def __init__(self, engine: Engine, *, max_concurrency: int, max_queue: int) -> None:
        self.engine = engine
        self.id = engine.model_id
        self.instance_id = engine.model_id
        self.max_queue = max_queue
        self._slots = asyncio.Semaphore(max_concurrency)
        self._waiting = 0
        self._active = 0
        self.loaded = not engine.needs_load
        self._loading: asyncio.Task[float] | None = None
        self._deltas_key = METRICS.key("sluicegate_engine_deltas_total", model=self.id)

    @property
    def busy(self) -> bool:
        return self._active > 0 or self._waiting > 0

    def open(self, request: ChatRequest) -> Generation:
        """Admit a request or refuse it at once; nothing here waits."""
        if self._waiting >= self.max_queue and self._slots.locked():
            raise SluicegateError(
                ErrorKind.OVERLOADED,
                f"model {self.id!r} has {self._waiting} requests queued (max_queue); retry later",
                code="server_overloaded",
            )
        self.engine.check(request)
        return Generation(self.instance_id, self._run(request))

    async def _run(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        self._active += 1
        METRICS.add_gauge("sluicegate_generations_active", 1, model=self.id)
        engine_events: AsyncIterator[RawEvent] | None = None
        try:
            if not self.loaded:
                async for load_event in self._ensure_loaded():
                    yield load_event
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

    async def _ensure_loaded(self) -> AsyncIterator[RawEvent]:
        """Load the model; only the request that starts the load sees its events."""
        if self._loading is not None:  # someone else is loading: wait quietly
            await asyncio.shield(self._loading)
            return
        progress: asyncio.Queue[float | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_progress(value: float) -> None:  # may be called from a loader thread
            loop.call_soon_threadsafe(progress.put_nowait, value)

        async def load() -> float:
            started = time.perf_counter()
            try:
                await self.engine.load(on_progress)
                self.loaded = True
            finally:
                loop.call_soon_threadsafe(progress.put_nowait, None)
            return time.perf_counter() - started

        # The load outlives a requester that goes away: the next request should not start over.
        self._loading = loading = asyncio.ensure_future(load())
        loading.add_done_callback(self._load_done)
        yield LoadStarted(self.instance_id)
        while (value := await progress.get()) is not None:
            yield LoadProgress(min(max(value, 0.0), 1.0))
        yield LoadFinished(await asyncio.shield(loading))

    def _load_done(self, task: asyncio.Task[float]) -> None:
        self._loading = None
        if not task.cancelled() and task.exception() is not None:
            log.error("loading model %s failed: %s", self.id, task.exception())

    async def load(self) -> float:
        """Explicit load (models API, CLI); returns the load time in seconds."""
        seconds = 0.0
        async for event in self._ensure_loaded():
            if isinstance(event, LoadFinished):
                seconds = event.seconds
        return seconds

    async def unload(self) -> None:
        if self.engine.needs_load and self.loaded:
            await self.engine.unload()
            self.loaded = False


class Registry:
    def __init__(self) -> None:
        self.models: dict[str, Model] = {}

    def add(self, model: Model) -> None:
        if model.id in self.models:
            raise ConfigError(f"model id {model.id!r} is declared twice")
        self.models[model.id] = model

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

    async def aclose(self) -> None:
        for model in self.models.values():
            try:
                await model.engine.aclose()
            except Exception:
                log.exception("closing model %s failed", model.id)


def build_model(table: dict[str, Any], base_dir: Path) -> Model:
    """A `[[models]]` table → a `Model`; the engine validates its own keys."""
    for key in ("id", "engine"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ConfigError(f"every [[models]] table needs a string `{key}`")
    cls = engine_class(table["engine"])
    own = {k: v for k, v in table.items() if k not in ("max_concurrency", "max_queue")}
    engine = cls.from_config(own, base_dir)
    max_concurrency = table.get("max_concurrency", 64)
    max_queue = table.get("max_queue", 256)
    for key, value in (("max_concurrency", max_concurrency), ("max_queue", max_queue)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (key == "max_concurrency"):
            raise ConfigError(f"model {table['id']!r}: `{key}` must be a non-negative integer")
    return Model(engine, max_concurrency=max_concurrency, max_queue=max_queue)
