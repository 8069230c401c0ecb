"""Metrics through prometheus-client: the small legacy API still works and renders as before,
the observer's histograms carry dialect/model/status, and with PROMETHEUS_MULTIPROC_DIR the
values of several processes are summed."""

from __future__ import annotations

import os
import subprocess
import sys
from bisect import bisect_left
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import (
    Finished,
    FinishReason,
    ItemKind,
    RawEvent,
    TextDelta,
    ToolResult,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ProviderInfo
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.observe import requests as observe
from sluicegate.observe.metrics import (
    TOKEN_GAP_BUCKETS,
    Metrics,
    forget_dead_processes,
)
from sluicegate.observe.requests import CLIENT_GONE, RequestObserver
from sluicegate.observe.series import PlainCounter, PlainGauge, PlainHistogram, SharedHistogram
from sluicegate.turn.pipeline import TurnPipeline


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.render()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def assert_same_series(metrics: Metrics) -> None:
    """The histogram series of dialect "a" and of dialect "b" hold the same samples."""
    got = samples(metrics)
    for name in ("bucket", "count", "sum"):
        a = {
            k[1] - {("dialect", "a")}: v
            for k, v in got.items()
            if k[0].endswith(name) and ("dialect", "a") in k[1]
        }
        b = {
            k[1] - {("dialect", "b")}: v
            for k, v in got.items()
            if k[0].endswith(name) and ("dialect", "b") in k[1]
        }
        assert a == b and a, name


def test_the_legacy_api_counts_and_renders() -> None:
    metrics = Metrics()
    key = metrics.key("sluicegate_engine_deltas_total", model="m")
    for _ in range(3):
        metrics.counters[key] += 1
    metrics.inc("sluicegate_requests_total", dialect="chat_completions", status="200")
    metrics.add_gauge("sluicegate_generations_active", 1, model="m")
    metrics.add_gauge("sluicegate_generations_active", 1, model="m")
    metrics.add_gauge("sluicegate_generations_active", -1, model="m")
    assert metrics.counters.get(key) == 3
    assert metrics.gauges[metrics.key("sluicegate_generations_active", model="m")] == 1
    text = metrics.render()
    assert 'sluicegate_engine_deltas_total{model="m"} 3.0' in text
    assert 'sluicegate_generations_active{model="m"} 1.0' in text
    assert 'sluicegate_requests_total{dialect="chat_completions",status="200"} 1.0' in text
    assert "_created" not in text


def test_a_bound_series_renders_as_the_dict_increments_did() -> None:
    """`cell(key).inc(n)` (a per-read counter bound once) and `counters[key] += n` on the same
    keys: the same /metrics bytes, and `count` reads the total at once; an untouched cell is
    not listed (a dict key is not until incremented)."""
    by_dict, by_cell = Metrics(), Metrics()
    deltas = Metrics.key("sluicegate_engine_deltas_total", model="m")
    reads = Metrics.key("sluicegate_fast_lane_reads_total")
    by_cell.cell(Metrics.key("sluicegate_engine_deltas_total", model="untouched"))
    assert by_dict.render_bytes() == by_cell.render_bytes()
    for n in (3, 1, 2):
        by_dict.counters[deltas] += n
        by_dict.counters[reads] += 1
        by_cell.cell(deltas).inc(n)
        by_cell.cell(reads).inc(1.0)
    by_cell.counters[deltas] += 4  # the instance's own count of a stream without a lane
    by_dict.counters[deltas] += 4
    assert by_cell.cell(deltas) is by_cell.cell(deltas)
    assert by_cell.count(deltas) == by_dict.count(deltas) == 10
    assert by_cell.count(reads) == 3
    assert by_dict.render_bytes() == by_cell.render_bytes()
    assert b'sluicegate_engine_deltas_total{model="m"} 10.0' in by_cell.render_bytes()
    assert b"untouched" not in by_cell.render_bytes()


def test_a_bound_series_of_several_processes_writes_the_shared_family(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics = Metrics()
    key = Metrics.key("sluicegate_fast_lane_reads_total")
    metrics.cell(Metrics.key("sluicegate_engine_deltas_total", model="untouched"))
    assert b"untouched" not in generate_latest(metrics.registry)  # no child before it counts
    cell = metrics.cell(key)
    cell.inc(2.0)
    cell.inc(1.0)
    metrics.counters[key] += 1
    assert metrics.count(key) == 4
    assert b"sluicegate_fast_lane_reads_total 4.0" in generate_latest(metrics.registry)


def test_an_observed_request(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics()
    monkeypatch.setattr(observe, "METRICS", metrics)
    observer = RequestObserver("chat_completions", "POST", "/v1/chat/completions", "req_1", model="m")
    observer.started = 10.0
    observer.first_token(now=10.5)
    observer.token(now=10.6)
    observer.token(now=10.8)
    observer.usage(Usage(prompt_tokens=7, completion_tokens=3))
    observer.tool_result(ProviderInfo("plugin", "files", "files"), None)
    observer.tool_result(ProviderInfo("ephemeral_mcp", "x", "x"), "boom")
    observer.end(200)
    failed = RequestObserver("responses", "POST", "/v1/responses", "req_2", model="m")
    failed.stream_status(CLIENT_GONE)
    failed.end(200)
    got = samples(metrics)

    def value(name: str, **labels: str) -> float:
        return got[(name, frozenset(labels.items()))]

    chat = {"dialect": "chat_completions", "model": "m"}
    assert value("sluicegate_request_duration_seconds_count", **chat, status="200") == 1
    assert (
        value("sluicegate_request_duration_seconds_count", dialect="responses", model="m", status="499") == 1
    )
    assert value("sluicegate_time_to_first_token_seconds_sum", **chat) == 0.5
    assert value("sluicegate_time_to_first_token_seconds_bucket", **chat, le="0.5") == 1
    assert value("sluicegate_inter_token_seconds_count", **chat) == 2
    assert round(value("sluicegate_inter_token_seconds_sum", **chat), 6) == 0.3
    assert value("sluicegate_prompt_tokens_total", **chat) == 7
    assert value("sluicegate_completion_tokens_total", **chat) == 3
    assert value("sluicegate_tool_calls_total", provider="files", outcome="ok") == 1
    assert value("sluicegate_tool_calls_total", provider="request", outcome="error") == 1


CHILD = """
import sys
from sluicegate.observe.metrics import METRICS
METRICS.inc("sluicegate_requests_total", dialect="chat_completions", status="200")
METRICS.add_gauge("sluicegate_generations_active", 1, model="m")
METRICS.record_load("m", 1.5, ok=True)
if sys.argv[1] == "render":
    sys.stdout.write(METRICS.render())
"""


def render_in_a_child(env: dict[str, str]) -> str:
    """/metrics as another process of the same directory renders it."""
    command = [sys.executable, "-c", CHILD, "render"]
    return subprocess.run(command, env=env, check=True, timeout=60, capture_output=True, text=True).stdout


def test_several_processes_are_summed(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", CHILD, "count"], env=env)
        assert child.wait(timeout=60) == 0
        multiprocess.mark_process_dead(child.pid, str(tmp_path))  # what a supervisor does on exit
    rendered = render_in_a_child(env)
    assert 'sluicegate_requests_total{dialect="chat_completions",status="200"} 3.0' in rendered
    assert 'sluicegate_model_loads_total{model="m",outcome="ok"} 3.0' in rendered
    assert 'sluicegate_model_load_seconds_count{model="m"} 3.0' in rendered
    # A gauge counts live processes only: the two that exited are gone.
    assert 'sluicegate_generations_active{model="m"} 1.0' in rendered


def test_the_live_gauges_of_a_process_gone_without_a_word_are_forgotten(tmp_path: Path) -> None:
    """A worker killed with SIGKILL cannot mark itself dead; its replacement does it for it."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, "count"], env=env)
    assert child.wait(timeout=60) == 0  # gone, its gauge file left behind
    live_file = tmp_path / f"gauge_livesum_{child.pid}.db"
    mine = tmp_path / f"gauge_livesum_{os.getpid()}.db"
    mine.write_bytes(live_file.read_bytes())  # a live process's file, which must stay
    assert forget_dead_processes(str(tmp_path)) == [child.pid]
    assert not live_file.exists() and mine.exists()
    assert (tmp_path / f"counter_{child.pid}.db").exists()  # its counts still add up
    rendered = render_in_a_child(env)
    assert 'sluicegate_requests_total{dialect="chat_completions",status="200"} 2.0' in rendered


def the_library_twin(metrics: Metrics) -> CollectorRegistry:
    """prometheus-client's own families, declared as `metrics` declares its plain ones."""
    registry = CollectorRegistry(auto_describe=True)
    for family in metrics.registry._collector_to_names:  # in their registration order
        if isinstance(family, PlainHistogram):
            Histogram(
                family.name, family.documentation, family.labelnames, buckets=family.bounds, registry=registry
            )
        elif isinstance(family, PlainGauge):
            Gauge(family.name, family.documentation, family.labelnames, registry=registry)
        elif isinstance(family, PlainCounter):
            Counter(family.name, family.documentation, family.labelnames, registry=registry)
    return registry


def test_the_plain_series_render_byte_for_byte_as_the_library_s() -> None:
    """/metrics is what prometheus-client's own families would print after the same updates:
    names, help, types, label order, series order, bucket bounds (values on a bound count in
    that bound's bucket), sums, and families with no series yet."""
    values = [0.0, *TOKEN_GAP_BUCKETS, *(b * 1.001 for b in TOKEN_GAP_BUCKETS), 1e9, 0.3]
    gaps = [0] * (len(TOKEN_GAP_BUCKETS) + 1)
    for value in values:
        gaps[bisect_left(TOKEN_GAP_BUCKETS, value)] += 1
    metrics = Metrics()
    library = the_library_twin(metrics)
    twins = {name: collector for collector, names in library._collector_to_names.items() for name in names}
    assert len(twins) > 20  # every declared family has its twin
    for family, labels in (
        (metrics.requests, ("chat", "m", "200")),
        (metrics.requests, ("chat", "m", "499")),
    ):
        for value in values:
            family.labels(*labels).observe(value)
            twins[family.name].labels(*labels).observe(value)
    metrics.inter_token.labels("chat", "m").observe_counts(gaps, sum(values))
    for value in values:
        twins[metrics.inter_token.name].labels("chat", "m").observe(value)
    for family, labels, amount in (
        (metrics.prompt_tokens, ("chat", "m"), 7),
        (metrics.completion_tokens, ("chat", "m"), 3),
        (metrics.completion_tokens, ("anthropic", "m"), 1),
        (metrics.queue_depth, ("m",), 2),
    ):
        family.labels(*labels).inc(amount)
        twins[family.name].labels(*labels).inc(amount)
    metrics.queue_depth.labels("m").dec()
    twins["sluicegate_queue_depth"].labels("m").dec()
    metrics.record_load("m", 1.5, ok=True)
    twins["sluicegate_model_loads_total"].labels("m", "ok").inc()
    twins["sluicegate_model_load_seconds"].labels("m").observe(1.5)
    ours = metrics.render_bytes()
    assert ours == generate_latest(library)
    assert b'sluicegate_inter_token_seconds_bucket{dialect="chat",le="0.01",model="m"} 8.0' in ours
    assert b'sluicegate_inter_token_seconds_count{dialect="chat",model="m"} 27.0' in ours


def test_the_shared_series_fill_the_buckets_the_library_s_observe_would() -> None:
    """With several processes the series are prometheus-client's cells, updated two cells an
    observation (bisection, no per-call checks) or a count per bucket at once."""
    bounds = (0.005, 0.01, 0.5, 2.0)
    values = [0.0, *bounds, *(b * 1.001 for b in bounds), 1e9]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = SharedHistogram(Histogram("h", "h", ["a"], buckets=bounds, registry=ours))
    library = Histogram("h", "h", ["a"], buckets=bounds, registry=theirs)
    counts = [0] * (len(bounds) + 1)
    for value in values:
        mine.labels("one").observe(value)
        library.labels("one").observe(value)
        library.labels("all").observe(value)
        counts[bisect_left(bounds, value)] += 1
    mine.labels("all").observe_counts(counts, sum(values))
    assert generate_latest(ours) == generate_latest(theirs)


async def test_the_stream_tap_reports_to_the_current_observer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tap as the stream core calls it (turn/stream_core.py), per canonical event."""
    monkeypatch.setattr(observe, "METRICS", Metrics())
    files = ProviderInfo("plugin", "files", "files")

    async def engine() -> AsyncIterator[RawEvent]:
        for event in (
            TextDelta(ItemKind.MESSAGE, "a"),
            TextDelta(ItemKind.MESSAGE, "b"),
            ToolResult("call_1", "read", "r", files, error="x"),
            UsageReport(Usage(prompt_tokens=4, completion_tokens=2)),
            Finished(FinishReason.STOP),
        ):
            yield event

    def pipeline() -> TurnPipeline:
        encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=True, logprobs=False)
        return TurnPipeline(engine(), encoder, Accumulator(), tap=observe.EventTap.current())

    observer = RequestObserver("chat_completions", model="m", log_text=True)
    token = observe._current.set(observer)
    try:
        lists = [frames async for frames in pipeline().frames()]
        assert len(lists) > 2
        assert observer.tokens == 2 and observer.first_token_at is not None
        assert (observer.prompt_tokens, observer.completion_tokens) == (4, 2)
        assert observer.answer_text == ["a", "b"] and observer.status_override is None
        assert observer.generating == 0

        cut = RequestObserver("chat_completions", model="m")
        observe._current.set(cut)
        stream = pipeline().frames()
        await anext(stream)  # the opening
        await anext(stream)  # the first read
        await stream.aclose()  # the client went away before the end
        assert cut.status_override == CLIENT_GONE
    finally:
        observe._current.reset(token)
