"""Prometheus metrics through `prometheus-client`, exposed at GET /metrics.

Two ways in:

- the declared families below (histograms of TTFT, inter-token and end-to-end latency, tokens,
  loads, tool calls…), fed by `sluicegate.observe.requests.RequestObserver` and a few hooks;
- the small dict-like API older code uses: `METRICS.inc(name, **labels)`,
  `METRICS.add_gauge(name, delta, **labels)`, and for hot paths a precomputed
  `key = METRICS.key(name, **labels)` with `METRICS.counters[key] += 1`. Those families are
  created on first use with the label names they were first used with. A per-read counter
  binds its series once instead (`cell = METRICS.cell(key)`, then `cell.inc(n)`: no tuple key
  hashed per read); `METRICS.count(key)` reads a key's total either way.

With `PROMETHEUS_MULTIPROC_DIR` set (several worker processes), every value lives in that
directory's memory-mapped files and /metrics sums them over the processes (gauges: live ones).
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from sluicegate.observe.series import (
    CounterSeries,
    Family,
    HistogramSeries,
    PlainCounter,
    PlainGauge,
    PlainHistogram,
    SharedFamily,
    SharedHistogram,
    SharedValue,
    Value,
)

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # `*_created` samples only add noise here

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)
LOAD_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

C = TypeVar("C", Counter, Gauge)


MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's own variable


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR_ENV) or None


_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db")


def forget_dead_processes(path: str) -> list[int]:
    """Drop the live gauges of processes that are gone (a worker killed without the chance to
    say so), so `/metrics` stops adding their last values; says whose."""
    from prometheus_client import multiprocess

    dead = set()
    for name in os.listdir(path):
        match = _LIVE_GAUGE_FILE.fullmatch(name)
        if match is not None and not _alive(int(match[1])):
            dead.add(int(match[1]))
    for pid in dead:
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
    return sorted(dead)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True


class _Table(MutableMapping[Key, float], Generic[C]):
    """`{(name, labels): value}` whose writes go to prometheus-client families.

    Reads return this process's own value (what `+=` needs); a write adds the difference to
    the family's child, so `table[key] += n` is one dict lookup and one `inc` per call.
    """

    def __init__(self, make: Callable[[str, list[str]], C]) -> None:
        self._make: Callable[[str, list[str]], C] = make
        self._values: dict[Key, float] = {}
        self._children: dict[Key, Any] = {}
        self._families: dict[str, tuple[C, tuple[str, ...]]] = {}

    def child(self, key: Key) -> Any:
        child = self._children.get(key)
        if child is None:
            name, labels = key
            names = tuple(k for k, _ in labels)
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = (self._make(name, list(names)), names)
            if family[1] != names:
                raise ValueError(f"metric {name} is labelled {family[1]}, not {names}")
            child = family[0].labels(*(v for _, v in labels)) if names else family[0]
            self._children[key] = child
        return child

    def __getitem__(self, key: Key) -> float:
        return self._values.get(key, 0.0)

    def __setitem__(self, key: Key, value: float) -> None:
        delta = value - self._values.get(key, 0.0)
        self._values[key] = value
        self.child(key).inc(delta)

    def __delitem__(self, key: Key) -> None:
        raise TypeError("metric series cannot be removed")

    def __iter__(self) -> Iterator[Key]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _shared_cell(table: _Table[Counter], key: Key) -> SharedValue:
    return SharedValue(lambda: table.child(key))


class _DictCollector:
    """The legacy counters and gauges of one process, as metric families. A bound counter
    series (`Metrics.cell`) is added to its key's dict value, and listed once it has counted
    (as a dict key is once it has been incremented)."""

    def __init__(
        self, counters: Mapping[Key, float], gauges: Mapping[Key, float], cells: Mapping[Key, Value]
    ) -> None:
        self.counters, self.gauges, self.cells = counters, gauges, cells

    def collect(self) -> Iterator[Metric]:
        counters = dict(self.counters)
        for key, cell in list(self.cells.items()):
            if cell.value or key in counters:
                counters[key] = counters.get(key, 0.0) + cell.value
        for table, family_class in ((counters, CounterMetricFamily), (self.gauges, GaugeMetricFamily)):
            families: dict[str, Metric] = {}
            for (name, labels), value in sorted(table.items()):
                family = families.get(name)
                if family is None:
                    family = families[name] = family_class(name, name, labels=[k for k, _ in labels])
                family.add_metric([v for _, v in labels], value)  # type: ignore[attr-defined]
            yield from families.values()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        # The small legacy API: plain dicts read at scrape time in one process (a dict increment
        # is all a per-token counter costs); prometheus-client cells with several processes.
        self.counters: MutableMapping[Key, float]
        self.gauges: MutableMapping[Key, float]
        self._cells: dict[Key, Value] = {}  # bound counter series: `cell`
        if multiprocess_dir() is None:
            self.counters, self.gauges = defaultdict(float), defaultdict(float)
            reg.register(_DictCollector(self.counters, self.gauges, self._cells))
        else:
            self.counters = _Table(lambda name, labels: Counter(name, name, labels, registry=reg))
            self.gauges = _Table(
                lambda name, labels: Gauge(name, name, labels, registry=reg, multiprocess_mode="livesum")
            )
        self._live: list[Collector] = []  # state read at scrape time (replica health)
        # Exposition text written by its owner, appended as is (llama-server's `llamacpp:*`).
        self._texts: list[Callable[[], bytes]] = []
        self.started = int(time.time())  # llama-server's `Process-Start-Time-Unix` header

        # The declared families: plain series read at scrape time in one process (a request
        # updates them with attribute arithmetic: observe/series.py), prometheus-client's
        # shared cells with several. Registered in this order: /metrics lists them so.
        shared = multiprocess_dir() is not None

        def histogram(
            name: str, doc: str, labels: list[str], buckets: tuple[float, ...]
        ) -> Family[HistogramSeries]:
            if shared:
                return SharedHistogram(Histogram(name, doc, labels, buckets=buckets, registry=reg))
            family = PlainHistogram(name, doc, labels, buckets)
            reg.register(family)
            return family

        def counter(name: str, doc: str, labels: list[str]) -> Family[CounterSeries]:
            if shared:
                return SharedFamily(Counter(name, doc, labels, registry=reg))
            family = PlainCounter(name, doc, labels)
            reg.register(family)
            return family

        def gauge(name: str, doc: str, labels: list[str]) -> Family[CounterSeries]:
            if shared:
                return SharedFamily(Gauge(name, doc, labels, registry=reg, multiprocess_mode="livesum"))
            family = PlainGauge(name, doc, labels)
            reg.register(family)
            return family

        self.requests = histogram(
            "sluicegate_request_duration_seconds",
            "End-to-end request time, from the request to the last byte of the response; its _count "
            "is the request count. status: the HTTP status, or for a stream the error's status, 499 "
            "when the client went away.",
            ["dialect", "model", "status"],
            LATENCY_BUCKETS,
        )
        self.ttft = histogram(
            "sluicegate_time_to_first_token_seconds",
            "From the request to the first generated token (reasoning or text or tool call).",
            ["dialect", "model"],
            LATENCY_BUCKETS,
        )
        self.inter_token = histogram(
            "sluicegate_inter_token_seconds",
            "Time between consecutive generated tokens of one response.",
            ["dialect", "model"],
            TOKEN_GAP_BUCKETS,
        )
        self.prompt_tokens = counter(
            "sluicegate_prompt_tokens_total", "Prompt (input) tokens.", ["dialect", "model"]
        )
        self.completion_tokens = counter(
            "sluicegate_completion_tokens_total",
            "Generated (output) tokens, reasoning included.",
            ["dialect", "model"],
        )
        self.queue_depth = gauge(
            "sluicegate_queue_depth",
            "Requests admitted to a model and waiting for a free slot (or for its load).",
            ["model"],
        )
        self.loads = counter(
            "sluicegate_model_loads_total", "Model loads, by outcome (ok, error).", ["model", "outcome"]
        )
        self.load_seconds = histogram(
            "sluicegate_model_load_seconds", "Time a model took to load.", ["model"], LOAD_BUCKETS
        )
        self.tool_calls = counter(
            "sluicegate_tool_calls_total",
            "Server-side tool calls, by provider (mcp server or plugin) and outcome (ok, error).",
            ["provider", "outcome"],
        )

    @staticmethod
    def key(name: str, **labels: str) -> Key:
        """A precomputed counter key, for hot paths that increment `counters[key]` directly."""
        return (name, tuple(sorted(labels.items())))

    def cell(self, key: Key) -> Value:
        """The series of counter `key`, bound once for a path that counts per read: `inc` adds
        to a plain attribute (several processes: also to the shared file). One per key."""
        found = self._cells.get(key)
        if found is None:
            table = self.counters
            found = self._cells[key] = _shared_cell(table, key) if isinstance(table, _Table) else Value()
        return found

    def count(self, key: Key) -> float:
        """This process's total of counter `key`: its dict value plus its bound series'."""
        cell = self._cells.get(key)
        return self.counters.get(key, 0.0) + (cell.value if cell is not None else 0.0)

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += value

    def add_gauge(self, name: str, value: float, **labels: str) -> None:
        self.gauges[(name, tuple(sorted(labels.items())))] += value

    def record_load(self, model: str, seconds: float, ok: bool) -> None:
        self.loads.labels(model, "ok" if ok else "error").inc()
        if ok:
            self.load_seconds.labels(model).observe(seconds)

    def add_live(self, collector: Collector) -> None:
        """A collector of state read at scrape time (this process's own, also in multiprocess mode)."""
        self._live.append(collector)

    def remove_live(self, collector: Collector) -> None:
        if collector in self._live:
            self._live.remove(collector)

    def add_text(self, source: Callable[[], bytes]) -> None:
        """Families in the text format, made at scrape time by `source` (this process's)."""
        self._texts.append(source)

    def render(self) -> str:
        return self.render_bytes().decode()

    def render_bytes(self) -> bytes:
        path = multiprocess_dir()
        if path is None:
            registry = _Joined(self.registry, self._live)
            return generate_latest(registry) + b"".join(text() for text in self._texts)
        from prometheus_client import multiprocess

        fresh = CollectorRegistry()
        multiprocess.MultiProcessCollector(fresh, path=path)  # type: ignore[no-untyped-call]
        return generate_latest(_Joined(fresh, self._live)) + b"".join(text() for text in self._texts)

    content_type = CONTENT_TYPE_PLAIN_0_0_4


S = TypeVar("S")


def child(family: Family[S], *values: str) -> S:
    """`family.labels(*values)`: every family of `Metrics` remembers its series (a dict lookup)."""
    return family.labels(*values)


class _Joined:
    """A registry plus live collectors, as one thing `generate_latest` can collect."""

    def __init__(self, registry: CollectorRegistry, live: Iterable[Collector]) -> None:
        self.registry, self.live = registry, list(live)

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()
        for collector in self.live:
            yield from collector.collect()


METRICS = Metrics()
