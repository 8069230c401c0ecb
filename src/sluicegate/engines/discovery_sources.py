"""Models found by asking an upstream: a discovery table's models, kept in step with its list.

A `[[models]]` table whose engine discovers (e.g. an OpenAI-compatible upstream's `/v1/models`)
becomes a `DiscoverySource`: its models are added under the table's limits, refreshed in the
background, and dropped (when idle) once the upstream no longer lists them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from sluicegate.engines.base import Discovery
from sluicegate.engines.models import Model

log = logging.getLogger(__name__)

DISCOVERY_FIRST_WAIT = 5.0  # seconds startup waits for each discovery's first answer
DISCOVERY_RETRY = 5.0  # seconds between attempts while a source cannot be reached


@dataclass(slots=True)
class DiscoverySource:
    """A discovery and what its models get: the table's limits, and the ids it added."""

    discovery: Discovery
    max_concurrency: int
    max_queue: int
    ids: set[str] = field(default_factory=set)

    async def discover(self, models: dict[str, Model]) -> bool:
        """Add to `models` those the source lists now, drop idle ones it no longer lists."""
        try:
            engines = await self.discovery.engines()
        except Exception as exc:
            log.warning("model discovery failed (%s); retrying in the background", exc)
            return False
        listed = set()
        for engine in engines:
            listed.add(engine.model_id)
            if engine.model_id in models:
                continue  # a configured model of that id wins; a known one stays as it is
            models[engine.model_id] = Model(
                engine, max_concurrency=self.max_concurrency, max_queue=self.max_queue
            )
            self.ids.add(engine.model_id)
            log.info("discovered model %s", engine.model_id)
        for model_id in sorted(self.ids - listed):
            model = models.get(model_id)
            if model is not None and not model.busy:
                del models[model_id]
                self.ids.discard(model_id)
                log.info("model %s is no longer listed upstream; removed", model_id)
        return True

    async def first_discovery(self, models: dict[str, Model]) -> bool:
        """Start the discovery and ask it once, bounded: startup does not wait for long."""
        await self.discovery.start()
        try:
            return await asyncio.wait_for(self.discover(models), DISCOVERY_FIRST_WAIT)
        except TimeoutError:
            return False

    async def refresh_forever(self, models: dict[str, Model], found: bool) -> None:
        """Ask again every `interval` (sooner while the source cannot be reached)."""
        while True:
            interval = self.discovery.interval
            await asyncio.sleep(interval if found else min(interval, DISCOVERY_RETRY))
            found = await self.discover(models)
