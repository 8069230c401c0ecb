"""Replicas of one upstream: routing (routing.py's policies) and health.

A replica is taken out when a connection to it fails (passive) or after `UNHEALTHY_AFTER`
failed health checks in a row (active), and put back when a health check passes. Without active
checks, a replica taken out is tried again after `RETRY_AFTER` seconds. When every replica is
out, requests still try them (a health state can be stale; an error is no better than a try).

Where an upstream reports its own load (llama-server's `/slots` and `/metrics`, vLLM's
`/metrics`: `load.py`), the health checks poll it too, and a replica's load for `least_busy`
and for `prefix_affinity`'s overload test is the larger of the upstream's count and this
process's own in-flight count. With a known capacity (llama-server's slots), `prefix_affinity`
leaves a replica only when it has no free slot and another one does: a request there would
wait for a whole generation, where elsewhere it only computes its prefix again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from sluicegate.core.request import ChatRequest
from sluicegate.engines.upstream.config import UpstreamConfig
from sluicegate.engines.upstream.http import ConnectFailed, HttpPool
from sluicegate.engines.upstream.load import LOAD_TIMEOUT, LoadProbe, LoadReport
from sluicegate.engines.upstream.routing import PrefixTable, SharedPrefixes, SlotMap, prefix_keys, shared_url

log = logging.getLogger(__name__)

UNHEALTHY_AFTER = 2  # failed active checks in a row
RETRY_AFTER = 10.0  # seconds a passively failed replica rests when there are no active checks
CHECK_TIMEOUT = 5.0


LOAD_FRESH_CHECKS = 3  # a load report is used for this many health-check intervals,
LOAD_FRESH_MAX = 5.0  # and never longer (seconds): with 10 s checks, a busy count ages fast


class Replica:
    __slots__ = (
        "check_failures",
        "down_until",
        "healthy",
        "name",
        "outstanding",
        "pool",
        "probe",
        "report",
        "slots",
    )

    def __init__(self, base_url: str, pool: HttpPool) -> None:
        self.name = base_url
        self.pool = pool
        self.outstanding = 0  # requests sent and not finished: the routing weight
        self.healthy = True
        self.check_failures = 0
        self.down_until = 0.0  # for passive failures without active checks
        self.probe: LoadProbe | None = None  # the upstream's own load reports, when polled
        self.report: LoadReport | None = None  # the last fresh one, set by `ReplicaSet.pick`
        self.slots: SlotMap | None = None  # prefix_affinity's slots, on an upstream that has them

    @property
    def load(self) -> int:
        """Requests on this replica: ours in flight, or what it reported if that is more."""
        report = self.report
        return self.outstanding if report is None else max(self.outstanding, report.load)

    @property
    def capacity(self) -> int | None:
        """Its slots, from the last report however old (a server's slots do not change while
        it runs; its busy count does, so `load` takes only a fresh report)."""
        last = None if self.probe is None else self.probe.report
        return None if last is None else last.capacity

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
        self.by_name = {r.name: r for r in self.replicas}
        # prefix_affinity's table (None for the other policies, and for a single replica)
        self.affinity = (
            PrefixTable(config.routing_table_size)
            if config.routing == "prefix_affinity" and len(self.replicas) > 1
            else None
        )
        self.shared: SharedPrefixes | None = None
        # The upstreams' own load, polled with the health checks, where the choice uses load.
        self.polls_load = (
            config.routing_load_reports
            and config.routing != "round_robin"
            and len(self.replicas) > 1
            and bool(config.health_check_interval)
        )
        if self.polls_load:
            for replica in self.replicas:
                replica.probe = LoadProbe(replica.name, config.headers, config.connect_timeout)
                if self.affinity is not None:
                    replica.slots = SlotMap(config.routing_table_size)

    def prefix_keys(self, request: ChatRequest) -> list[bytes]:
        """The request's prefix hashes for `pick`, when the policy routes by prefix (else [])."""
        if self.affinity is None:
            return []
        return prefix_keys(self.config.upstream_model, request)

    async def recall(self, keys: Sequence[bytes]) -> None:
        """What the other Sluicegate replicas know of these prefixes, into the local table
        (with Redis sharing; a Redis that does not answer in time is skipped)."""
        if self.shared is None or self.affinity is None or not keys:
            return
        names = await self.shared.fetch(keys)
        if names is None:
            return
        # The longest prefix another replica served wins over a shorter one known here (for the
        # same prefix, theirs is as recent: Redis holds the last writer's).
        for i in range(len(keys) - 1, -1, -1):
            name = names[i]
            if name is not None and name in self.by_name:
                if self.affinity.lookup(keys[i + 1 :]) is None:
                    self.affinity.record(keys[i : i + 1], name)
                return

    def pick(self, exclude: set[Replica], keys: Sequence[bytes] = ()) -> Replica | None:
        """The replica to send to, `exclude` (those tried) left out: by the config's `routing`
        (`keys`: the request's prefix hashes, for prefix_affinity)."""
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
        if self.polls_load:
            fresh_for = min(LOAD_FRESH_CHECKS * self.config.health_check_interval, LOAD_FRESH_MAX)
            for replica in candidates:
                assert replica.probe is not None
                replica.report = replica.probe.fresh(now, fresh_for)
        if self.config.routing == "round_robin":
            # Each replica in turn, in the configured order; one out (or tried) is passed over.
            n = len(self.replicas)
            for step in range(n):
                replica = self.replicas[(self._turn + step) % n]
                if replica in candidates:
                    return replica
        if keys and self.affinity is not None:
            name = self.affinity.lookup(keys)
            sticky = self.by_name.get(name) if name is not None else None
            if sticky is not None and sticky in candidates and not self.overloaded(sticky, candidates):
                return sticky
        start = self._turn % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        return min(rotated, key=lambda r: r.load)

    def overloaded(self, replica: Replica, candidates: list[Replica]) -> bool:
        """With a known capacity (slots): no free slot there while another candidate has one
        (or is less busy, capacity unknown). Without: at least `routing_overload_factor` x the
        mean of the candidates' loads, and at least two more than the least busy (a replica
        busy with one request is still the better place for a prefix it holds than an idle one
        that must compute it)."""
        load, capacity = replica.load, replica.capacity
        if capacity is not None:
            if load < capacity:
                return False
            return any(
                r.load < (r.capacity if r.capacity is not None else load)
                for r in candidates
                if r is not replica
            )
        loads = [r.load for r in candidates]
        mean = sum(loads) / len(loads)
        return load >= self.config.routing_overload_factor * mean and load >= min(loads) + 2

    def pin(self, replica: Replica, keys: Sequence[bytes]) -> int | None:
        """prefix_affinity on an upstream that reports its slots (llama-server): the slot to
        send to (`SlotMap`), held until `unpin`; None: no slot to name."""
        capacity = replica.capacity
        if replica.slots is None or not keys or not capacity:
            return None
        busy = frozenset() if replica.report is None else replica.report.busy_slots
        return replica.slots.pin(keys, capacity, busy)

    def unpin(self, replica: Replica, slot: int | None) -> None:
        if slot is not None and replica.slots is not None:
            replica.slots.unpin(slot)

    def served(self, replica: Replica, keys: Sequence[bytes]) -> None:
        """`replica` accepted a request with these prefixes: it holds them now."""
        if keys and self.affinity is not None:
            self.affinity.record(keys, replica.name)
            if self.shared is not None:
                self.shared.publish(keys, replica.name)

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
        url = shared_url()
        if self.affinity is not None and url is not None and self.shared is None:
            self.shared = SharedPrefixes(url)
        if self.config.health_check_interval and self._checker is None:
            self._checker = asyncio.get_running_loop().create_task(self._check_forever())

    async def _check_forever(self) -> None:
        while True:
            await asyncio.gather(*(self.check(r) for r in self.replicas))
            if self.polls_load:
                await asyncio.gather(*(self.poll_load(r) for r in self.replicas))
            await asyncio.sleep(self.config.health_check_interval)

    async def poll_load(self, replica: Replica) -> None:
        """Ask a healthy replica for its load (a down one's report just ages out)."""
        if replica.probe is not None and replica.healthy:
            await replica.probe.poll(min(LOAD_TIMEOUT, self.config.health_check_interval))

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
        if self.shared is not None:
            await self.shared.aclose()
            self.shared = None
        for replica in self.replicas:
            await replica.pool.aclose()
            if replica.probe is not None:
                await replica.probe.aclose()
