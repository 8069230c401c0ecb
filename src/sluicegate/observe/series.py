"""Metric families whose series are plain attributes of this process, read at scrape time.

A request touches a handful of series (its TTFT and duration histograms, its token counters,
the queue-depth gauge of its model); with prometheus-client's own children each touch is a
locked, checked update of several calls. Here a series is a slotted object a request updates
with plain arithmetic, and the family is a prometheus-client `Collector` that turns the
series into the same samples (names, labels, order, values) when /metrics is scraped.

With several worker processes (`PROMETHEUS_MULTIPROC_DIR`) the values must live in the shared
files, so `sluicegate.observe.metrics` uses prometheus-client's families there, behind the same
two small interfaces (`CounterSeries`, `HistogramSeries`), and nothing else changes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class CounterSeries(Protocol):
    """One labelled series of a counter or a gauge."""

    def inc(self, amount: float = 1.0) -> None: ...

    def dec(self, amount: float = 1.0) -> None: ...


class HistogramSeries(Protocol):
    """One labelled series of a histogram."""

    def observe(self, value: float) -> None: ...

    def observe_counts(self, counts: list[int], total: float) -> None:
        """Observations already counted per bucket (`counts[i]`: values <= bucket i's bound and
        above the one before; the last is +Inf), and their sum."""
        ...


S = TypeVar("S", covariant=True)


class Family(Protocol[S]):
    def labels(self, *values: str) -> S: ...


def bucket(bounds: tuple[float, ...], value: float) -> int:
    """`bisect_left(bounds, value)`: the first bound >= value (`le` is inclusive, as
    prometheus-client's `observe` counts it), len(bounds) for +Inf. Compiled, a native loop
    over unboxed floats: no generic call, no boxed value, no rich comparisons (a paced token's
    gap finds its bucket here)."""
    lo, hi = 0, len(bounds)
    while lo < hi:
        mid = (lo + hi) // 2
        if bounds[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Value:
    """A counter's or a gauge's series (a counter only ever gets `inc` with amount >= 0: ours)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class SharedValue(Value):
    """A legacy counter's bound series with several processes (`Metrics.cell`): this process's
    own total in `value` (what `Metrics.count` reads), each increment also written to the
    prometheus-client child, made on the first one (so an untouched series is not exposed)."""

    __slots__ = ("_child", "_make")

    def __init__(self, make: Callable[[], Any]) -> None:
        super().__init__()
        self._make: Callable[[], Any] = make
        self._child: Any = None

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount
        child = self._child
        if child is None:
            child = self._child = self._make()
        child.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)


class Buckets:
    """A histogram's series: a count per bucket (not cumulative; the last is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bound >= value: `le` is inclusive, as prometheus-client's `observe` counts it.
        self.counts[bucket(self.bounds, value)] += 1
        self.sum += value

    def observe_counts(self, counts: list[int], total: float) -> None:
        mine = self.counts
        if len(mine) != len(counts):
            raise ValueError(f"{len(counts)} counts for {len(mine)} buckets")
        for i, count in enumerate(counts):
            if count:
                mine[i] += count
        self.sum += total


T = TypeVar("T", Value, Buckets)


class _Plain(Generic[T]):
    """A family of plain series and the collector of its samples."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], make: Callable[[], T]
    ) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self._make: Callable[[], T] = make
        self._series: dict[tuple[str, ...], T] = {}  # in the order first used, as prometheus-client

    def labels(self, *values: str) -> T:
        found = self._series.get(values)
        if found is None:  # new, or values that are not strings yet (prometheus-client's str())
            key = tuple(str(v) for v in values)
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name} is labelled {self.labelnames}, not {values}")
            found = self._series.get(key)
            if found is None:
                found = self._series[key] = self._make()
        return found

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, series in list(self._series.items()):
            self._add(family, list(values), series)
        yield family

    def _family(self) -> Metric:
        raise NotImplementedError

    def _add(self, family: Any, values: list[str], series: T) -> None:
        raise NotImplementedError


class PlainCounter(_Plain[Value]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames, Value)

    def _family(self) -> Metric:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: Any, values: list[str], series: Value) -> None:
        family.add_metric(values, series.value)


class PlainGauge(PlainCounter):
    def _family(self) -> Metric:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)


class PlainHistogram(_Plain[Buckets]):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if bounds != tuple(sorted(bounds)) or bounds[-1] == float("inf"):
            raise ValueError("bounds: ascending, +Inf implied")
        super().__init__(name, documentation, labelnames, lambda: Buckets(bounds))
        self.bounds = bounds
        self._le = [*(floatToGoString(b) for b in bounds), "+Inf"]  # type: ignore[no-untyped-call]

    def _family(self) -> Metric:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: Any, values: list[str], series: Buckets) -> None:
        cumulative, acc = [], 0.0
        for le, count in zip(self._le, series.counts, strict=True):
            acc += count
            cumulative.append((le, acc))
        family.add_metric(values, cumulative, series.sum)


class SharedHistogram:
    """A prometheus-client `Histogram` (multiprocess mode) behind `HistogramSeries`."""

    def __init__(self, histogram: Any) -> None:
        self.histogram = histogram
        self._series: dict[tuple[str, ...], _SharedBuckets] = {}

    def labels(self, *values: str) -> _SharedBuckets:
        found = self._series.get(values)
        if found is None:
            found = self._series[values] = _SharedBuckets(self.histogram.labels(*values))
        return found


class _SharedBuckets:
    __slots__ = ("child",)

    def __init__(self, child: Any) -> None:
        self.child = child

    def observe(self, value: float) -> None:
        # The bucket found by bisection (the first bound >= value, as `observe` finds it walking
        # every bound), with no exemplar: two cell increments.
        child = self.child
        child._buckets[bisect_left(child._upper_bounds, value)].inc(1)  # a list: not `bucket`
        child._sum.inc(value)

    def observe_counts(self, counts: list[int], total: float) -> None:
        buckets = self.child._buckets
        if len(buckets) != len(counts):
            raise ValueError(f"{len(counts)} counts for {len(buckets)} buckets")
        for cell, count in zip(buckets, counts, strict=True):
            if count:
                cell.inc(count)
        self.child._sum.inc(total)


class SharedFamily:
    """A prometheus-client `Counter` or `Gauge` (multiprocess mode) whose children are looked up
    once: its own `labels` checks the values and takes a lock on every call."""

    def __init__(self, family: Any) -> None:
        self.family = family
        self._series: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> CounterSeries:
        found = self._series.get(values)
        if found is None:
            found = self._series[values] = self.family.labels(*values)
        return found  # type: ignore[no-any-return]
