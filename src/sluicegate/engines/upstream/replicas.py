"""Replicas of one upstream: least-outstanding-requests routing and health.

A replica is taken out when a connection to it fails (passive) or after `UNHEALTHY_AFTER`
failed health checks in a row (active), and put back when a health check passes. Without active
checks, a replica taken out is tried again after `RETRY_AFTER` seconds. When every replica is
out, requests still try them (a health state can be stale; an error is no better than a try).
"""

from __future__ import annotations

import asyncio
import logging
import time

from sluicegate.engines.upstream.config import UpstreamConfig
from sluicegate.engines.upstream.http import ConnectFailed, HttpPool

log = logging.getLogger(__name__)

UNHEALTHY_AFTER = 2  # failed active checks in a row
RETRY_AFTER = 10.0  # seconds a passively failed replica rests when there are no active checks
CHECK_TIMEOUT = 5.0


class Replica:
    __slots__ = ("check_failures", "down_until", "healthy", "name", "outstanding", "pool")

    def __init__(self, base_url: str, pool: HttpPool) -> None:
        self.name = base_url
        self.pool = pool
        self.outstanding = 0  # requests sent and not finished: the routing weight
        self.healthy = True
        self.check_failures = 0
        self.down_until = 0.0  # for passive failures without active checks

    def available(self, now: float) -> bool:
        return self.healthy or 0 < self.down_until <= now


class ReplicaSet:
    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.replicas = [
            Replica(url, HttpPool(url, config.headers, connect_timeout=config.connect_timeout))
            for url in config.base_urls
        ]
        self._turn = 0  # rotates ties, so idle replicas share the load
        self._checker: asyncio.Task[None] | None = None

    def pick(self, exclude: set[Replica]) -> Replica | None:
        """The available replica with the fewest requests in flight, `exclude` left out."""
        if len(self.replicas) == 1:  # the usual table: no choice to make, on every request
            only = self.replicas[0]
            self._turn += 1
            return None if only in exclude else only
        now = time.monotonic()
        candidates = [r for r in self.replicas if r not in exclude and r.available(now)]
        if not candidates:
            candidates = [r for r in self.replicas if r not in exclude]
        if not candidates:
            return None
        self._turn += 1
        start = self._turn % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        return min(rotated, key=lambda r: r.outstanding)

    def connect_failed(self, replica: Replica, reason: str) -> None:
        if replica.healthy:
            log.warning("upstream replica %s is down (%s); taking it out", replica.name, reason)
        replica.healthy = False
        if not self.config.health_check_interval:
            replica.down_until = time.monotonic() + RETRY_AFTER

    def answered(self, replica: Replica) -> None:
        """The replica answered a request: whatever failed before, it is serving now."""
        if not replica.healthy:
            log.info("upstream replica %s answered; back in", replica.name)
            replica.healthy, replica.check_failures, replica.down_until = True, 0, 0.0

    def start(self) -> None:
        if self.config.health_check_interval and self._checker is None:
            self._checker = asyncio.get_running_loop().create_task(self._check_forever())

    async def _check_forever(self) -> None:
        while True:
            await asyncio.gather(*(self.check(r) for r in self.replicas))
            await asyncio.sleep(self.config.health_check_interval)

    async def check(self, replica: Replica) -> None:
        """One active health check: 2xx on `health_path` is healthy."""
        timeout = min(CHECK_TIMEOUT, self.config.health_check_interval or CHECK_TIMEOUT)
        try:
            status, _ = await replica.pool.get(self.config.health_path, timeout=timeout)
            ok, reason = 200 <= status < 300, f"HTTP {status}"
        except ConnectFailed as exc:
            ok, reason = False, str(exc)
        if ok:
            if not replica.healthy:
                log.info("upstream replica %s passed its health check; back in", replica.name)
            replica.healthy, replica.check_failures = True, 0
            return
        replica.check_failures += 1
        if replica.healthy and replica.check_failures >= UNHEALTHY_AFTER:
            log.warning(
                "upstream replica %s failed %d health checks (%s); taking it out",
                replica.name,
                replica.check_failures,
                reason,
            )
            replica.healthy = False

    async def aclose(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            await asyncio.gather(self._checker, return_exceptions=True)
            self._checker = None
        for replica in self.replicas:
            await replica.pool.aclose()
