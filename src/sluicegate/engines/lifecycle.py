"""Model lifecycle: unload instances idle past their TTL, and auto-evict old JIT loads.

One background task (`Lifecycle.run`, started with the server) does all the unloading; a request
never owns a timer. The rules, from LM Studio's "idle TTL" and "only keep last JIT model":

- An instance is *idle* when no request is running or queued on it; a request arriving or
  leaving restarts its idle clock. Nothing busy or loading is ever unloaded.
- Its TTL is the one the last request or explicit load gave it (`ttl`); otherwise a JIT-loaded
  instance gets its model's `ttl` or the server's `jit_ttl_seconds` (0: never), and an explicitly
  loaded one (models API, CLI) has none.
- With `jit_auto_evict`, a JIT load marks every other JIT-loaded (or loading) instance for
  eviction; those that are idle go at once, before the new load, the busy ones as soon as
  they go idle. Explicitly loaded instances are never evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sluicegate.engines.instances import Instance
from sluicegate.engines.load_caps import LoadCaps
from sluicegate.engines.models import Model, ModelHooks
from sluicegate.engines.registry import Registry

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 5.0


class Lifecycle(ModelHooks):
    def __init__(
        self,
        registry: Registry,
        *,
        jit_ttl: float | None,
        auto_evict: bool = False,
        interval: float = DEFAULT_INTERVAL,
        caps: LoadCaps | None = None,
    ) -> None:
        self.registry = registry
        self.caps = caps or LoadCaps()
        self.jit_ttl = jit_ttl or None  # 0: JIT loads stay until unloaded or evicted
        self.auto_evict = auto_evict
        self.interval = interval
        self._wake = asyncio.Event()
        self._reaping = asyncio.Lock()
        registry.set_hooks(self)

    def ttl_of(self, model: Model, instance: Instance) -> float | None:
        if instance.ttl is not None:
            return instance.ttl
        if instance.jit:
            if model.ttl is not None:
                return model.ttl or None  # 0 means never, as for jit_ttl_seconds
            return self.jit_ttl
        return None

    def _due(self, model: Model, instance: Instance, now: float) -> bool:
        if not instance.engine.needs_load or not instance.loaded or instance.busy or instance.loading:
            return False
        if instance.evict_when_idle:
            return True
        ttl = self.ttl_of(model, instance)
        return ttl is not None and now - instance.last_used >= ttl

    async def reap(self, now: float | None = None) -> list[str]:
        """Unload every instance that is due now; returns their ids."""
        now = time.monotonic() if now is None else now
        unloaded: list[str] = []
        async with self._reaping:
            for model in list(self.registry.models.values()):
                for instance in list(model.instances):
                    # Checked right before unloading, with no await in between: a request
                    # admitted after this sees the instance unloaded and loads it again.
                    if not self._due(model, instance, now):
                        continue
                    reason = "evicted" if instance.evict_when_idle else "idle TTL passed"
                    try:
                        unloaded += await model.unload(instance.instance_id)
                    except Exception:
                        log.exception("unloading %s failed", instance.instance_id)
                        continue
                    log.info("unloaded %s (%s)", instance.instance_id, reason)
        return unloaded

    async def before_jit_load(self, instance: Instance) -> None:
        if not self.auto_evict:
            return
        for model in self.registry.models.values():
            for other in model.instances:
                if other is not instance and other.jit and (other.loaded or other.loading):
                    other.evict_when_idle = True
        await self.reap()

    def check_load(self, model: Model, instance: Instance | None) -> None:
        self.caps.check_load(self.registry, model, instance)

    async def before_load(self, instance: Instance) -> None:
        async def unload(model: Model, other: Instance) -> None:
            async with self._reaping:  # never alongside the reaper unloading the same instance
                if other.loaded and not other.busy and not other.loading:
                    await model.unload(other.instance_id)

        await self.caps.make_room(self.registry, instance, unload)

    def went_idle(self, instance: Instance) -> None:
        if instance.evict_when_idle:
            self._wake.set()

    async def run(self) -> None:
        """The reaper: every `interval` seconds, or at once when an evicted instance goes idle."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                await self.reap()
            except Exception:
                log.exception("the model reaper failed")
