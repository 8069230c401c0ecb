"""Gauges read from the model registry at scrape time: which models are loaded, and the health
and load of each upstream replica. Only this process's state (what it routes with)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from sluicegate.engines.registry import Registry


class RegistryCollector:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        loaded = GaugeMetricFamily(
            "sluicegate_model_loaded", "Loaded instances of each model.", labels=["model"]
        )
        healthy = GaugeMetricFamily(
            "sluicegate_upstream_replica_healthy",
            "1 while an upstream replica is considered healthy, 0 while it is skipped.",
            labels=["model", "replica"],
        )
        outstanding = GaugeMetricFamily(
            "sluicegate_upstream_replica_outstanding",
            "Requests sent to an upstream replica and not finished yet.",
            labels=["model", "replica"],
        )
        for model_id, model in list(self.registry.models.items()):
            loaded.add_metric([model_id], len(model.loaded_instances()))
            replica_set = getattr(model.engine, "replicas", None)
            for replica in getattr(replica_set, "replicas", ()):
                healthy.add_metric([model_id, replica.name], 1.0 if replica.healthy else 0.0)
                outstanding.add_metric([model_id, replica.name], replica.outstanding)
        yield loaded
        yield healthy
        yield outstanding
