"""What an upstream says of its own load, for routing (`replicas.py`): polled beside the health
checks from the server's own endpoints, at its root (the base URL without its `/v1`).

- llama-server `GET /slots` (on by default): one object per slot, `is_processing` — its
  capacity (slots) and how many are busy.
- llama-server `GET /metrics` (with `--metrics`): `llamacpp:requests_processing` and
  `llamacpp:requests_deferred` (waiting for a slot).
- vLLM `GET /metrics`: `vllm:num_requests_running` and `vllm:num_requests_waiting` (one sample
  per label set, e.g. `model_name`; summed).

An upstream that answers neither (a cloud API, a proxy) is asked again only every
`PROBE_AGAIN` seconds; a report older than `fresh_for` is not used. The upstream's count
includes requests from elsewhere (other Sluicegate replicas, other clients): routing takes the
larger of it and this process's own in-flight count.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import orjson

from sluicegate.engines.upstream.http import ConnectFailed, HttpPool

LOAD_TIMEOUT = 1.0  # seconds a load poll may take (loopback answers in ms; a busy server in one step)
MAX_REPORT_BYTES = 1 << 20  # a /metrics page with histograms is ~100 KB; larger is not a report
PROBE_AGAIN = 60.0  # seconds before an endpoint that did not answer usefully is asked again

# Prometheus gauge → what it counts: the upstream's requests running, and waiting for a place.
RUNNING = ("llamacpp:requests_processing", "vllm:num_requests_running")
WAITING = ("llamacpp:requests_deferred", "vllm:num_requests_waiting")

Source = Literal["slots", "metrics"]


@dataclass(frozen=True, slots=True)
class LoadReport:
    busy: int  # requests the upstream is working on
    waiting: int  # requests queued for a place
    capacity: int | None  # places (llama-server slots); None: not reported
    at: float  # time.monotonic() of the poll
    busy_slots: frozenset[int] = frozenset()  # llama-server: the ids of the slots processing

    @property
    def load(self) -> int:
        return self.busy + self.waiting


def root_url(base_url: str) -> str:
    """The server's root: llama-server's and vLLM's `/slots` and `/metrics` sit beside `/v1`."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def parse_slots(body: bytes) -> tuple[int, frozenset[int]] | None:
    """(slots, the busy ones' ids) from llama-server's `/slots`, or None if it is not that."""
    try:
        slots = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(slots, list) or not slots or not all(isinstance(s, dict) for s in slots):
        return None
    if not all("is_processing" in s for s in slots):
        return None
    busy = frozenset(
        s["id"] if isinstance(s.get("id"), int) else i
        for i, s in enumerate(slots)
        if s["is_processing"] is True
    )
    return len(slots), busy


def parse_metrics(body: bytes) -> tuple[int, int] | None:
    """(running, waiting) from a Prometheus page of llama-server or vLLM, or None if it names
    neither's gauges. Samples of one name with different labels are summed."""
    running = waiting = 0
    found = False
    for match in _SAMPLE.finditer(body):
        name = match[1].decode()
        if name not in RUNNING and name not in WAITING:
            continue
        try:
            value = int(float(match[2]))
        except ValueError:
            continue
        found = True
        if name in RUNNING:
            running += value
        else:
            waiting += value
    return (running, waiting) if found else None


# A sample line: a name, optional labels (quoted values may hold anything but a newline), a value.
_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^\n]*\})?[ \t]+(\S+)", re.MULTILINE)


class LoadProbe:
    """One replica's load polls: which endpoints answer, and the last report."""

    def __init__(self, base_url: str, headers: dict[str, str], connect_timeout: float | None) -> None:
        self.pool = HttpPool(root_url(base_url), headers, connect_timeout=connect_timeout)
        self.report: LoadReport | None = None
        self._absent: dict[Source, float] = {}  # endpoint → when to ask it again

    def fresh(self, now: float, fresh_for: float) -> LoadReport | None:
        report = self.report
        return report if report is not None and now - report.at <= fresh_for else None

    async def _get(self, source: Source, timeout: float) -> bytes | None:
        now = time.monotonic()
        if self._absent.get(source, 0.0) > now:
            return None
        try:
            status, body = await self.pool.get(f"/{source}", timeout=timeout, max_bytes=MAX_REPORT_BYTES)
        except ConnectFailed:
            return None  # down or slow: the health check says so; the report just ages
        if status != 200:
            self._absent[source] = now + PROBE_AGAIN
            return None
        return body

    async def poll(self, timeout: float = LOAD_TIMEOUT) -> LoadReport | None:
        """Ask the endpoints that answer; keep and return the new report (None: no report)."""
        capacity: int | None = None
        busy: int | None = None
        busy_slots: frozenset[int] = frozenset()
        waiting = 0
        body = await self._get("slots", timeout)
        if body is not None:
            slots = parse_slots(body)
            if slots is None:
                self._absent["slots"] = time.monotonic() + PROBE_AGAIN
            else:
                capacity, busy_slots = slots
                busy = len(busy_slots)
        body = await self._get("metrics", timeout)
        if body is not None:
            gauges = parse_metrics(body)
            if gauges is None:
                self._absent["metrics"] = time.monotonic() + PROBE_AGAIN
            else:
                running, waiting = gauges
                busy = running if busy is None else max(busy, running)
        if busy is None:
            return None
        self.report = LoadReport(busy, waiting, capacity, time.monotonic(), busy_slots)
        return self.report

    async def aclose(self) -> None:
        await self.pool.aclose()
