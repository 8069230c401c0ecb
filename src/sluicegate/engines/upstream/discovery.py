"""`discover = true`: serve every model an upstream lists on `/v1/models`.

Each listed model becomes a Sluicegate model `prefix + upstream id`, sharing the table's
replicas (one connection pool and one health check per replica, however many models). The
registry asks again every `discover_interval` seconds; an upstream that cannot be reached is
retried, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from sluicegate.engines.base import Discovery, Engine
from sluicegate.engines.upstream.config import UpstreamConfig
from sluicegate.engines.upstream.http import ConnectFailed
from sluicegate.engines.upstream.replicas import CHECK_TIMEOUT, Replica, ReplicaSet


class UpstreamDiscovery(Discovery):
    def __init__(self, config: UpstreamConfig, make: Callable[[UpstreamConfig, ReplicaSet], Engine]) -> None:
        self.config = config
        self.interval = config.discover_interval or 60.0
        self.replicas = ReplicaSet(config)
        self._make = make  # the engine class (passed in: engine.py imports this module)

    async def start(self) -> None:
        self.replicas.start()

    async def engines(self) -> list[Engine]:
        tried: set[Replica] = set()
        problems = []
        while (replica := self.replicas.pick(tried)) is not None:
            tried.add(replica)
            try:
                status, body = await replica.pool.get("/models", timeout=CHECK_TIMEOUT)
            except ConnectFailed as exc:
                self.replicas.connect_failed(replica, str(exc))
                problems.append(f"{replica.name}: {exc}")
                continue
            ids = _model_ids(body) if status == 200 else None
            if ids is None:
                problems.append(f"{replica.name}: HTTP {status} without a model list")
                continue
            prefix = self.config.prefix
            return [self._make(self.config.for_model(prefix + i, i), self.replicas) for i in ids]
        raise ConnectionError(f"could not list the upstream's models ({'; '.join(problems)})")

    async def aclose(self) -> None:
        await self.replicas.aclose()


def _model_ids(body: bytes) -> list[str] | None:
    try:
        listing = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
