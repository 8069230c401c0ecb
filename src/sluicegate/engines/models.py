"""Models: the instances behind one id, which one a request goes to, and loading more."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sluicegate.core.checks import off_loop
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.request import ChatRequest, SamplingParams
from sluicegate.engines import model_defaults
from sluicegate.engines.base import Engine, LoadConfig
from sluicegate.engines.instances import Generation, Instance, InstanceHooks, deltas_key

T = TypeVar("T")


class ModelHooks(InstanceHooks):
    """The lifecycle manager's hooks: an instance's, and the check before a model loads one."""

    def check_load(self, model: Model, instance: Instance | None) -> None:
        """`instance` (None: a new instance of `model`) is about to be loaded: raise a
        `SluicegateError` now if an operator's cap forbids it (`engines/load_caps.py`)."""

    def ttl_of(self, model: Model, instance: Instance) -> float | None:
        """The idle seconds after which `instance` is unloaded (None: it stays loaded)."""
        return instance.ttl


NO_HOOKS = ModelHooks()


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
        sampling: SamplingParams | None = None,
        tags: tuple[str, ...] = (),
    ) -> None:
        self.id = engine.model_id
        self.tags = tags  # labels for the listing (`tags`), never for routing
        self.sampling = sampling  # defaults for what a request leaves unset (model_defaults.py)
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.factory = factory
        self.ttl = ttl  # idle TTL of its JIT loads (None: the server's `jit_ttl_seconds`)
        self._hooks = NO_HOOKS
        self.deltas_key = deltas_key(self.id)  # its engine's deltas counter (`instances.deltas_key`)
        self.instances = [
            Instance(engine, engine.model_id, max_concurrency=max_concurrency, max_queue=max_queue)
        ]
        for _ in range(engine.parallel - 1):
            self.add_instance()
        self.fixed = len(self.instances)  # built up front: unloading keeps them, loadable

    def unloads_in(self, instance: Instance) -> float | None:
        """Seconds until `instance` is unloaded for being idle, if nothing uses it before (None:
        it stays loaded; 0 while due); the listings show it (Ollama's `expires_at`)."""
        ttl = self._hooks.ttl_of(self, instance)
        if ttl is None or not instance.engine.needs_load:
            return None
        return max(ttl - (time.monotonic() - instance.last_used), 0.0)

    @property
    def hooks(self) -> ModelHooks:
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: ModelHooks) -> None:
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
        if self.sampling is not None:
            model_defaults.apply(self.sampling, request.sampling)
        instance = self._admit()
        instance.engine.check(request)
        if not instance.loaded and not instance.loading:
            self._hooks.check_load(self, instance)  # a JIT load a cap forbids: refused before it starts
        return instance.generation(request)

    async def admit(self, request: ChatRequest) -> Generation:
        """`open`, with the engine's check off the event loop when it says its checks are heavy
        (`Engine.heavy_checks`: tokenizing a long prompt, images through a projector)."""
        if not self.instances[0].engine.heavy_checks:  # (`engine`, without the property's call)
            return self.open(request)
        model_defaults.apply(self.sampling, request.sampling)
        instance = self._admit()
        generation = instance.generation(request)  # its queue place, from now: a burst is bounded
        try:
            await off_loop(lambda: instance.engine.check(request))
            if not instance.loaded and not instance.loading:
                self._hooks.check_load(self, instance)
        except BaseException:
            await generation.aclose()
            raise
        return generation

    async def run(self, work: Callable[[Engine], Awaitable[T]]) -> tuple[T, str]:
        """A task besides chat (`Engine.embed`, `Engine.rerank`) on the least busy instance,
        admitted like `open`'s (or refused at once): its result and the instance that ran it."""
        instance = self._admit()
        if not instance.loaded and not instance.loading:
            self._hooks.check_load(self, instance)
        return await instance.run(work), instance.instance_id

    def _admit(self) -> Instance:
        instances = self.instances
        instance = instances[0] if len(instances) == 1 else self.pick()
        if instance.full:
            raise SluicegateError(
                ErrorKind.OVERLOADED,
                f"model {self.id!r} has {instance._waiting} requests queued (max_queue); retry later",
                code="server_overloaded",
            )
        return instance

    def admit_task(self) -> Instance:
        """The instance a task that streams (speech: `Engine.transcribe`, `Engine.synthesize`)
        runs on, or a refusal at once; enter its `slot()` right away (nothing here waits)."""
        instance = self._admit()
        if not instance.loaded and not instance.loading:
            self._hooks.check_load(self, instance)
        return instance

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
        config: LoadConfig | None = None,
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
        if config is not None and config.context_length is not None:
            target.config.context_length = config.context_length
        return target, await target.load_now(ttl)

    async def unload(self, instance_id: str | None = None) -> list[str]:
        """Unload one instance (or all); extra instances go away, the first stays loadable."""
        targets = [i for i in self.instances if instance_id in (None, i.instance_id)]
        for target in targets:
            await target.unload()
            if target not in self.instances[: self.fixed]:
                self.instances.remove(target)
        return [t.instance_id for t in targets]
