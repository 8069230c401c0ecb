"""Caps an operator sets on what clients may make the server load.

- `max_instances`: instances of one model the models API may load (LM Studio's `:2`, `:3`
  ids). Each llama.cpp instance has weights and a context of its own, so without a cap 300
  `POST /api/v1/models/load` calls make 301 instances. Instances the config asks for
  (`parallel`) count, but are never refused.
- `max_loaded_model_bytes`: the GGUF bytes loaded (or loading) at once, summed over every
  instance. A load that would pass it first unloads idle just-in-time loads, least recently
  used first; if that cannot make room (what is loaded is busy or was loaded explicitly), the
  load is refused with a clear error instead of swapping the machine to death.

`Lifecycle` (the instance hooks) calls these; the policy lives here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.engines.instances import Instance
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry

log = logging.getLogger(__name__)

DEFAULT_MAX_INSTANCES = 4


def physical_memory() -> int | None:
    """The machine's RAM in bytes, where the OS says (the default memory cap)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def instance_bytes(instance: Instance) -> int:
    """What loading `instance` costs: its GGUF file's size (0 for engines that load nothing)."""
    if not instance.engine.needs_load:
        return 0
    size = instance.engine.info().details.get("size_bytes")
    return size if isinstance(size, int) and size > 0 else 0


@dataclass(slots=True)
class LoadCaps:
    max_instances: int = DEFAULT_MAX_INSTANCES  # 0: no cap
    max_loaded_bytes: int = 0  # 0: no cap

    @classmethod
    def from_settings(cls, max_instances: int, max_loaded_bytes: int | None) -> LoadCaps:
        """`max_loaded_model_bytes` unset means the machine's physical memory."""
        if max_loaded_bytes is None:
            max_loaded_bytes = physical_memory() or 0
        return cls(max_instances, max_loaded_bytes)

    def check_new_instance(self, model: Model) -> None:
        """Refuse another instance of `model` past `max_instances` (a 400 naming the cap)."""
        if self.max_instances and len(model.instances) >= max(self.max_instances, model.fixed):
            raise SluicegateError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{model.id}' already has {len(model.instances)} instances, the most this server "
                f"allows (max_instances = {self.max_instances}); unload one first.",
                param="model",
                code="max_instances_reached",
            )

    def _in_use(self, registry: Registry, instance: Instance | None) -> int:
        return sum(
            instance_bytes(other)
            for model in registry.models.values()
            for other in model.instances
            if other is not instance and (other.loaded or other.loading)
        )

    def _evictable(self, registry: Registry, instance: Instance | None) -> list[tuple[Model, Instance]]:
        """Idle just-in-time loads other than `instance`, least recently used first."""
        found = [
            (model, other)
            for model in registry.models.values()
            for other in model.instances
            if other is not instance
            and other.jit
            and other.loaded
            and not other.busy
            and not other.loading
            and instance_bytes(other)
        ]
        return sorted(found, key=lambda pair: pair[1].last_used)

    def _refuse(self, name: str, needed: int, in_use: int) -> SluicegateError:
        return SluicegateError(
            ErrorKind.OVERLOADED,
            f"Loading '{name}' ({needed} bytes) would pass the server's memory cap "
            f"(max_loaded_model_bytes = {self.max_loaded_bytes}; {in_use} bytes stay loaded: busy, "
            "or loaded explicitly). Unload a model first.",
            param="model",
            code="max_loaded_model_bytes_reached",
        )

    def check_load(self, registry: Registry, model: Model, instance: Instance | None) -> None:
        """Refuse at once a load no eviction could make room for; `instance` None: a new one."""
        if instance is None:
            self.check_new_instance(model)
        needed = instance_bytes(instance or model.instances[0])
        if not self.max_loaded_bytes or not needed:
            return
        in_use = self._in_use(registry, instance)
        freeable = sum(instance_bytes(other) for _, other in self._evictable(registry, instance))
        if in_use - freeable + needed > self.max_loaded_bytes:
            raise self._refuse(instance.instance_id if instance else model.id, needed, in_use - freeable)

    async def make_room(
        self,
        registry: Registry,
        instance: Instance,
        unload: Callable[[Model, Instance], Awaitable[None]],
    ) -> None:
        """Right before `instance` loads: unload idle JIT loads until it fits, or refuse."""
        needed = instance_bytes(instance)
        if not self.max_loaded_bytes or not needed:
            return
        for model, other in self._evictable(registry, instance):
            if self._in_use(registry, instance) + needed <= self.max_loaded_bytes:
                return
            if other.busy or not other.loaded:  # a request got to it while others unloaded
                continue
            log.info(
                "unloading %s to make room for %s (max_loaded_model_bytes)",
                other.instance_id,
                instance.instance_id,
            )
            await unload(model, other)
        in_use = self._in_use(registry, instance)
        if in_use + needed > self.max_loaded_bytes:
            raise self._refuse(instance.instance_id, needed, in_use)
