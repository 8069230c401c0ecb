"""Instances of a model's engine: admission (a bounded queue in front of a concurrency limit),
just-in-time loading, and the state its lifecycle decides on.

An instance admits a request or refuses it at once (503 when full, never a hang); a request
that finds its instance unloaded loads it just in time, and that load's progress becomes load
events for the request that caused it. Each instance also keeps what its lifecycle (idle TTL,
auto-evict: `engines/lifecycle.py`) decides on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from sluicegate.core.errors import EngineFailure, SluicegateError
from sluicegate.core.events import (
    LoadFinished,
    LoadProgress,
    LoadStarted,
    RawBatch,
    RawEvent,
    TextDelta,
    ToolCallDelta,
)
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import Engine, LoadConfig
from sluicegate.engines.lane import Lane, ReadsThrough
from sluicegate.observe.metrics import METRICS, Key, child

log = logging.getLogger(__name__)
T = TypeVar("T")


class InstanceHooks:
    """What an instance tells the lifecycle manager; this base does nothing (no lifecycle).
    A model's own hook (`check_load`) is `engines.models.ModelHooks`, which extends this."""

    async def before_jit_load(self, instance: Instance) -> None:
        """A request is about to load `instance` just in time."""

    def went_idle(self, instance: Instance) -> None:
        """`instance` has no request running or queued any more."""

    async def before_load(self, instance: Instance) -> None:
        """`instance` is loading now: make room for it, or raise a `SluicegateError`."""


NO_HOOKS = InstanceHooks()


def deltas_key(model_id: str) -> Key:
    """The counter of the text and tool-call deltas a model's engine made: counted by the
    instance, or, for a generation given a fast lane, by its stream's core (turn/stream_core.py),
    whose reads may bypass the instance's loop."""
    return METRICS.key("sluicegate_engine_deltas_total", model=model_id)


@dataclass(slots=True)
class Generation:
    """An admitted request: who serves it, and its raw events (waiting for a slot comes first).

    Whoever obtains a generation owns it: iterate `events`, or `aclose()` it, on every path (a
    turn that fails before its first event must close it to give its queue place back).
    Closing after iterating is harmless.
    """

    instance_id: str
    events: AsyncIterator[RawEvent]

    def read_through(self, lane: Lane) -> bool:
        """Offer the engine a stream's fast lane (`engines/lane.py`), before the first event is
        read; True when it takes it. Then the engine's deltas are not counted here: the stream's
        core counts them (`deltas_key`), since reads the lane carries bypass this loop."""
        events = self.events
        if type(events) is not _Admitted or events._started:
            return False
        # (not `isinstance` of the runtime-checkable protocol: that walks the protocol's
        # members on every call, once per request)
        if not callable(getattr(events._instance.engine, "generate_through", None)):
            return False
        events.lane = lane
        return True

    async def aclose(self) -> None:
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            await aclose()


class _Admitted:
    """An instance's event stream, counted as waiting from admission (not from its first
    iteration, so a burst cannot overrun `max_queue`) until it starts or is closed.

    Its owner must either iterate it or `aclose()` it: a stream dropped unstarted keeps its
    queue place (nothing here depends on garbage collection to give it back)."""

    __slots__ = ("_gen", "_held", "_instance", "_request", "_started", "lane")

    def __init__(self, instance: Instance, request: ChatRequest) -> None:
        self._instance = instance
        self._request = request
        self._gen: AsyncIterator[RawEvent] | None = None  # made by the first `__anext__`
        self._started = False
        self._held = False  # the engine's relay ends the instance's part (`end`)
        self.lane: Lane | None = None  # given before the first event (`Generation.read_through`)

    def __aiter__(self) -> _Admitted:
        return self

    def __anext__(self) -> Awaitable[RawEvent]:
        # The generator's own awaitable, not a coroutine around it: one frame less per event.
        gen = self._gen
        if gen is None:
            self._started = True  # from here on the generation owns the waiting count
            instance, lane = self._instance, self.lane
            if lane is not None and instance._slots is None and instance.loaded:
                # Nothing to wait for, nothing to load: the slot is taken now and the engine's
                # relay is the whole stream, giving it back at its end (`end`): one coroutine,
                # not this instance's loop passing on each of its events.
                instance._take()
                if (ttl := self._request.options.ttl) is not None:
                    instance.ttl = float(ttl)  # as `_run` does
                self._held = True
                engine: ReadsThrough = instance.engine  # type: ignore[assignment]  # (no `cast` call at runtime)
                gen = self._gen = engine.generate_through(self._request, lane, self)
            else:
                gen = self._gen = instance._run(self._request, self)
        return gen.__anext__()

    def end(self, cancelled: bool) -> None:
        """`Held.end`: the engine's relay is over."""
        if self._held:
            self._held = False
            self._instance._give_back(cancelled, None)

    async def aclose(self) -> None:
        if not self._started:  # the generation never took its waiting count over: give the place back here
            self._started = True
            self._instance._unqueued()
        gen = self._gen
        if gen is not None:
            aclose = getattr(gen, "aclose", None)
            if aclose is not None:
                await aclose()
        if self._held:  # a relay closed before it ever ran ends nothing itself
            self.end(True)

    def unwrapped(self) -> AsyncIterator[RawEvent]:
        """Once started, this stream only passes its generator's steps on: a consumer may
        iterate that directly (the answer wait's, `transport/answer_first.py`), and still
        `aclose()` this one."""
        return self._gen if self._gen is not None else self


class Instance:
    """One loaded (or loadable) copy of a model's engine, with its own slots and load state."""

    def __init__(self, engine: Engine, instance_id: str, *, max_concurrency: int, max_queue: int) -> None:
        self.engine = engine
        self.id = engine.model_id  # the model id, for metrics labels
        self.instance_id = instance_id
        self.config = LoadConfig()  # load settings asked for (e.g. context_length)
        self.max_queue = max_queue
        # 0: no cap (an upstream that batches decides how many it runs at once).
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency > 0 else None
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
        self._deltas_key = deltas_key(self.id)
        self._active_key = METRICS.key("sluicegate_generations_active", model=self.id)

    @property
    def busy(self) -> bool:
        return self._active > 0 or self._waiting > 0

    @property
    def pending(self) -> int:
        """Requests running or waiting here: the routing weight."""
        return self._active + self._waiting

    @property
    def full(self) -> bool:
        return self._slots is not None and self._waiting >= self.max_queue and self._slots.locked()

    @property
    def loading(self) -> bool:
        return self._loading is not None

    def generation(self, request: ChatRequest) -> Generation:
        self._waiting += 1
        METRICS.queue_depth.labels(self.id).inc()  # (`child`, without its frame: once a start)
        self.last_used = time.monotonic()  # a request arriving resets the idle clock
        return Generation(self.instance_id, _Admitted(self, request))

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A task that is not a chat (speech, issue 45) on this instance: counted as waiting from
        the call (enter it at once, as `Model.admit_task` returns), then a slot, loaded just in time,
        and the idle clock restarted when it leaves, on every path."""
        slots = await self._queued_slot()
        try:
            if not self.loaded:
                async for _ in self._ensure_loaded(jit=True):
                    pass
            yield
        finally:
            self._give_back(False, slots)

    async def _queued_slot(self) -> asyncio.Semaphore | None:
        """A task that is not a chat (`slot`, `run`) arrived: it waits for a slot, and the idle
        clock restarts; gone while queued, it leaves the queue. The slots to give back."""
        self._waiting += 1
        child(METRICS.queue_depth, self.id).inc()
        self.last_used = time.monotonic()
        slots = self._slots
        try:
            if slots is not None:
                await slots.acquire()
        except BaseException:  # gone while queued
            self._unqueued()
            raise
        self._take()
        return slots

    def _unqueued(self) -> None:
        """A request left before it had a slot."""
        self._waiting -= 1
        child(METRICS.queue_depth, self.id).dec()
        self._settle()

    def _settle(self) -> None:
        """A request left: restart the idle clock, and say so when nothing else is here."""
        self.last_used = time.monotonic()
        if self._active <= 0 and self._waiting <= 0:  # not `busy` (the property's call, once a request)
            self.hooks.went_idle(self)

    def _take(self) -> None:
        """A generation leaves the queue for a slot (`_run`, or `_Admitted` for a relay that
        ends the generation itself)."""
        self._waiting -= 1
        METRICS.queue_depth.labels(self.id).dec()
        self._active += 1
        METRICS.gauges[self._active_key] += 1

    def _give_back(self, cancelled: bool, slots: asyncio.Semaphore | None) -> None:
        """A generation that had a slot is over, on every path."""
        if cancelled:
            METRICS.inc("sluicegate_generations_cancelled_total", model=self.id)
        self._active -= 1
        METRICS.gauges[self._active_key] -= 1
        if slots is not None:
            slots.release()
        self._settle()

    async def _run(self, request: ChatRequest, admitted: _Admitted) -> AsyncGenerator[RawEvent, None]:
        # `_queued_slot`'s wait, inlined (the queue place was taken at admission): a coroutine
        # less per chat's start.
        slots = self._slots
        try:
            if slots is not None:
                await slots.acquire()
        except BaseException:  # gone while queued
            self._unqueued()
            raise
        self._take()
        engine_events: AsyncIterator[RawEvent] | None = None
        cancelled = False
        try:
            if not self.loaded:
                if self._loading is None and request.options.context_length is not None:
                    self.config.context_length = request.options.context_length  # this request loads it
                async for load_event in self._ensure_loaded(jit=True):
                    yield load_event
            if (ttl := request.options.ttl) is not None:
                self.ttl = float(ttl)  # the dialect checked it; it governs the instance it used
            lane = admitted.lane
            if lane is not None:  # the stream's core counts the deltas (see `deltas_key`)
                engine_events = cast(ReadsThrough, self.engine).generate_through(request, lane)
                async for event in engine_events:
                    yield event
                return
            engine_events = self.engine.generate(request)
            counters, key = METRICS.counters, self._deltas_key  # live: watch it stop on cancel
            async for event in engine_events:
                if type(event) is TextDelta or type(event) is ToolCallDelta:
                    counters[key] += 1
                elif type(event) is RawBatch:
                    for inner in event.events:
                        if type(inner) is TextDelta or type(inner) is ToolCallDelta:
                            counters[key] += 1
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        finally:
            if engine_events is not None:
                aclose = getattr(engine_events, "aclose", None)
                if aclose is not None:
                    await aclose()
            self._give_back(cancelled, slots)

    async def run(self, work: Callable[[Engine], Awaitable[T]]) -> T:
        """A task besides chat (`Engine.embed`, `Engine.rerank`) in a slot like a generation's:
        queued, loaded just in time (its load events go unseen), counted. Cancelling the caller
        (client gone, deadline) cancels `work` and gives the slot back at once."""
        slots = await self._queued_slot()
        cancelled = False
        try:
            if not self.loaded:
                async for _ in self._ensure_loaded(jit=True):
                    pass
            return await work(self.engine)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self._give_back(cancelled, slots)

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
                    self.engine.configure_load(self.config)
                    await self.engine.load(on_progress)
                self.loaded = True
                self.last_used = time.monotonic()
            except BaseException:
                self.jit = False
                METRICS.record_load(self.id, time.perf_counter() - started, ok=False)
                raise
            finally:
                loop.call_soon_threadsafe(progress.put_nowait, None)
            METRICS.record_load(self.id, seconds := time.perf_counter() - started, ok=True)
            return seconds

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
        self.config = LoadConfig()  # a later (JIT) load starts from the model's defaults
        self.jit, self.ttl, self.evict_when_idle = False, None, False
