"""Gateway benchmark: what a relay adds to a fast OpenAI-compatible upstream, against the
upstream itself, nginx and LiteLLM, all in one run on loopback.

Run from the repository root (venv active):

    python bench/gateway.py [--litellm PATH] [--json results.json]

Processes (each its own): a fake upstream (`bench/fast_upstream.py`), the gateways under test,
and the load generator (`bench/load_client.py`, one process per measurement). Targets:

  (a) direct        the fake upstream itself: the baseline every ratio is taken against
  (b) sg-chat       Sluicegate Chat Completions, `engine = "openai"` → the upstream
  (b1) sg-chat-nolane  Sluicegate Chat Completions without the fast lane
                    (SLUICEGATE_FAST_LANE=0): every read through the generators
  (b2) sg-chat-noyield  Sluicegate Chat Completions with a lane that never yields to a
                    request start (SLUICEGATE_LANE_YIELDS=0): the yield's worth in TTFT
  (b0) sg-chat-pure Sluicegate Chat Completions uncompiled (SLUICEGATE_PURE_PYTHON=1), a
                    second server beside (b): the compiled hot path against its Python source
  (c) sg-responses  Sluicegate Responses (translated to upstream Chat Completions)
  (c2) sg-lmstudio  Sluicegate LM Studio REST v1
  (c4) sg-ollama    Sluicegate Ollama `/api/chat` (NDJSON)
  (c3) sg-completions  Sluicegate `/v1/completions` → the upstream's `/v1/completions`
  (d) nginx         nginx as a plain SSE reverse proxy (proxy_buffering off)
  (d0) py-floor     a TCP splice in Python on uvloop (`relay_floor.py`): the least any Python
                    relay does per upstream read (one read, one write, one wake-up), no HTTP
  (d1) py-lean      a lean Python relay (`relay_lean.py`): HTTP, SSE and each chunk's JSON read
                    and written again, in the protocol callback of the read, no framework
  (e) litellm       LiteLLM's proxy pointed at the upstream
  (f) asgi-floor    the floor of Sluicegate's stack (`asgi_floor.py`): a raw ASGI app on
                    uvicorn (httptools, uvloop), served as `sluicegate serve` is, doing per
                    request what sg-chat must at the least: the body read, written upstream over
                    a pooled kept-alive connection, each upstream read relayed as one
                    `http.response.body`; no parsing, validation, routing or metrics
  (f1) asgi-floor-stock  the same on uvicorn's own httptools protocol (not Sluicegate's subclass)
  (f0) asgi-static  uvicorn's own floor: no upstream, every POST answered with a fixed one-token
                    stream (measured in the start phase and the latency runs with one token only)

Measurements: the request start (`--start-requests` one-token requests, 16 at a time: the
gateway's CPU per request, its threads' run time from /proc's schedstat, as
`bench/request_start.py` loads it); then, like vLLM's serving benchmark (TTFT to the first
content-bearing chunk, ITL, end-to-end), with the upstream pacing tokens (--delay-ms) at concurrency 1, 16 and 64; relay
throughput (tokens/s) with no inter-token delay; and the memory of --hold-streams open slow
streams (RSS delta of the gateway's process tree / streams). CPU time of every process is
recorded, so a saturated upstream or client shows. nginx and LiteLLM are skipped, with a
message, when not installed; so is Sluicegate when its `openai` engine is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway_targets import (
    Proc,
    Target,
    cpu_seconds,
    find_litellm,
    find_nginx,
    free_port,
    rss_bytes,
    run_ns,
    sluicegate_missing,
    start,
    start_asgi_floor,
    start_litellm,
    start_nginx,
    start_python_relay,
    start_redis,
    start_sluicegate,
    wait_ready,
)

HERE = Path(__file__).resolve().parent
TITLES = {
    "direct": "(a) upstream direct",
    "sg-chat": "(b) Sluicegate chat",
    "sg-chat-pure": "(b0) Sluicegate chat, pure",
    "sg-chat-nolane": "(b1) Sluicegate chat, no lane",
    "sg-chat-noyield": "(b2) Sluicegate, no yield",
    "sg-responses": "(c) Sluicegate responses",
    "sg-lmstudio": "(c2) Sluicegate LM Studio",
    "sg-completions": "(c3) Sluicegate text",
    "sg-ollama": "(c4) Sluicegate Ollama",
    "nginx": "(d) nginx",
    "py-floor": "(d0) Python floor (TCP splice)",
    "py-lean": "(d1) lean Python relay",
    "litellm": "(e) LiteLLM",
    "asgi-floor": "(f) ASGI floor (uvicorn)",
    "asgi-floor-stock": "(f1) ASGI floor, stock",
    "asgi-static": "(f0) ASGI static (uvicorn)",
}


# --- measuring ---------------------------------------------------------------------------------


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass
class Run:
    """One load-client run against one target."""

    concurrency: int
    requests: int
    tokens: int
    wall: float
    ttft: list[float]
    itl: list[float]
    e2e: list[float]
    received: int
    errors: list[str]
    cpu: dict[str, float]  # process → CPU seconds / wall (1.0 = one core)
    gateway_seconds: float = 0.0  # the gateway's CPU seconds over the run (the scheduler's count)

    @property
    def tps(self) -> float:
        return self.received / self.wall

    def stats(self) -> dict[str, Any]:
        ms = 1000.0
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "tokens_per_request": self.tokens,
            "tokens_per_second": self.tps,
            "ttft_ms": {
                "mean": mean(self.ttft) * ms,
                "p50": pct(self.ttft, 50) * ms,
                "p99": pct(self.ttft, 99) * ms,
            },
            "itl_ms": {
                "mean": mean(self.itl) * ms,
                "p50": pct(self.itl, 50) * ms,
                "p99": pct(self.itl, 99) * ms,
            },
            "e2e_ms": {
                "mean": mean(self.e2e) * ms,
                "p50": pct(self.e2e, 50) * ms,
                "p99": pct(self.e2e, 99) * ms,
            },
            "cpu_cores": self.cpu,
            "errors": self.errors[:5],
        }


def client_cmd(
    target: Target, mode: str, model: str, tokens: int, concurrency: int, requests: int
) -> list[str]:
    return [
        sys.executable,
        str(HERE / "load_client.py"),
        mode,
        "--port", str(target.port),
        "--path", target.path,
        "--dialect", target.dialect,
        "--body", target.body(model, tokens),
        "--concurrency", str(concurrency),
        "--requests", str(requests),
    ]  # fmt: skip


def load(
    target: Target,
    upstream: Proc,
    model: str,
    tokens: int,
    concurrency: int,
    requests: int,
    duration: float = 0.0,
) -> Run:
    """One client process: it connects, then runs on our word, so CPU is read over its run only."""
    watched = {"upstream": upstream.pids(), "gateway": target.proc.pids() if target.proc else []}
    cmd = client_cmd(target, "run", model, tokens, concurrency, requests)
    with tempfile.NamedTemporaryFile(prefix="load-", suffix=".json") as result:
        client = subprocess.Popen(
            [*cmd, "--duration", str(duration), "--out", result.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert client.stdin is not None and client.stdout is not None
        ready = client.stdout.readline()
        before = {k: cpu_seconds(v) for k, v in watched.items()}
        ran = run_ns(watched["gateway"])
        started = time.perf_counter()
        client.stdin.write(b"go\n")
        client.stdin.flush()
        client.stdout.readline()  # DONE
        wall = time.perf_counter() - started
        after = {k: cpu_seconds(v) for k, v in watched.items()}
        ran = run_ns(watched["gateway"]) - ran
        _, err = client.communicate(timeout=60)
        if client.returncode != 0 or not ready.startswith(b"CONNECTED"):
            raise RuntimeError(f"load client failed on {target.key}:\n{err.decode()[-3000:]}")
        out = json.loads(Path(result.name).read_bytes())
    cpu = {k: (after[k] - before[k]) / wall for k, v in watched.items() if v}
    cpu["client"] = out["client_cpu"] / out["wall"]
    streams = out["streams"]
    errors = [s["error"] for s in streams if s["error"]]
    errors += [
        f"{s['tokens']} content chunks, expected {tokens}"
        for s in streams
        if not s["error"] and s["tokens"] != tokens
    ]
    ok = [s for s in streams if s["tokens"]]
    return Run(
        concurrency=concurrency,
        requests=len(streams),
        tokens=tokens,
        wall=out["wall"],
        ttft=[s["ttft"] for s in ok],
        itl=[x for s in ok for x in s["itl"]],
        e2e=[s["e2e"] for s in ok],
        received=out["received"],
        errors=errors,
        cpu=cpu,
        gateway_seconds=ran / 1e9,
    )


def hold(target: Target, model: str, streams: int, settle: float) -> dict[str, Any]:
    """RSS of the gateway's processes before, with half of `streams` slow streams open and
    flowing, and with all of them.

    Two figures per stream: from the RSS before (what the issue's target names), and the
    marginal one, from half to all. The first depends on the baseline: memory a process freed
    after the runs before but kept (allocator arenas) is reused by the first streams, so a
    baseline that happens to be high makes streams look cheap. The second is what one more
    stream costs once the process is in that state.
    """
    assert target.proc is not None
    base = rss_bytes(target.proc.pids())
    first = _open_streams(target, model, streams // 2)
    time.sleep(settle)
    half = rss_bytes(target.proc.pids())
    second = _open_streams(target, model, streams - streams // 2)
    time.sleep(settle)
    held = rss_bytes(target.proc.pids())
    errors = [*_close_streams(target, first[0]), *_close_streams(target, second[0])]
    flowing = first[1] + second[1]
    return {
        "streams": streams,
        "flowing": flowing,
        "rss_before_mib": base / 2**20,
        "rss_half_mib": half / 2**20,
        "rss_open_mib": held / 2**20,
        "kib_per_stream": (held - base) / 1024 / max(flowing, 1),
        "kib_per_stream_marginal": (held - half) / 1024 / max(second[1], 1),
        "errors": errors,
    }


def _open_streams(target: Target, model: str, streams: int) -> tuple[subprocess.Popen[bytes], int]:
    """A hold client with `streams` streams open; returns once they flow (or it gave up)."""
    client = subprocess.Popen(
        client_cmd(target, "hold", model, 100_000, streams, streams),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdout is not None
    line = client.stdout.readline().decode()
    return client, int(line.split()[1]) if line.startswith("READY") else 0


def _close_streams(target: Target, client: subprocess.Popen[bytes]) -> list[str]:
    assert client.stdin is not None
    client.stdin.write(b"\n")
    client.stdin.flush()
    out, err = client.communicate(timeout=120)
    if client.returncode != 0:
        raise RuntimeError(f"hold client failed on {target.key}:\n{err.decode()[-3000:]}")
    errors: list[str] = json.loads(out)["errors"]
    return errors


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Results:
    meta: dict[str, Any]
    latency: dict[str, dict[int, Run]] = field(default_factory=dict)
    throughput: dict[str, Run] = field(default_factory=dict)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    capacity: dict[str, dict[str, Any]] = field(default_factory=dict)
    starts: dict[str, Run] = field(default_factory=dict)  # one-token requests: CPU per request start
    skipped: dict[str, str] = field(default_factory=dict)


def measure_target(target: Target, upstream: Proc, args: argparse.Namespace, results: Results) -> None:
    lat_model, thr_model = f"fake-d{args.delay_ms:g}", "fake-d0"
    fixed = target.answers  # a target that answers a fixed stream: its token count is asked
    load(target, upstream, lat_model, fixed or 8, 16, 32)  # warm up: connections, first-call costs
    if not fixed:
        load(target, upstream, thr_model, 256, 16, 32)
    if args.start_requests and target.proc is not None:
        run = load(target, upstream, thr_model, 1, args.start_concurrency, args.start_requests)
        results.starts[target.key] = run
        print(
            f"  {target.key:<13} start: {_start_us(run):7.1f} µs of CPU per one-token request "
            f"(c={args.start_concurrency}, {run.requests}){_errors(run)}",
            flush=True,
        )
    results.latency[target.key] = {}
    for c in args.concurrency:
        requests = max(args.requests_c1 if c == 1 else 0, c * args.waves)
        run = load(target, upstream, lat_model, fixed or args.tokens, c, requests)
        results.latency[target.key][c] = run
        print(f"  {target.key:<13} c={c:<3} {_latency_line(run)}", flush=True)
    if fixed:  # no stream to relay: no throughput, nothing to hold
        return
    run = load(
        target,
        upstream,
        thr_model,
        args.throughput_tokens,
        args.throughput_concurrency,
        0,
        args.throughput_seconds,
    )
    results.throughput[target.key] = run
    cpu = " ".join(f"{k} {v * 100:.0f}%" for k, v in run.cpu.items())
    print(f"  {target.key:<13} throughput {run.tps:>9,.0f} tokens/s  CPU: {cpu}{_errors(run)}", flush=True)
    if target.proc is not None and target.key in args.hold_targets and args.hold_streams:
        mem = hold(target, f"fake-d{args.hold_delay_ms:g}", args.hold_streams, args.hold_settle)
        results.memory[target.key] = mem
        print(
            f"  {target.key:<13} {mem['flowing']}/{mem['streams']} streams open: RSS {mem['rss_before_mib']:.1f}"
            f" → {mem['rss_open_mib']:.1f} MiB, {mem['kib_per_stream']:.1f} KiB per stream"
            f" ({mem['kib_per_stream_marginal']:.1f} marginal)",
            flush=True,
        )
    if target.proc is not None and target.key in args.hold_targets and args.capacity_streams:
        cap = hold(target, f"fake-d{args.hold_delay_ms:g}", args.capacity_streams, args.hold_settle)
        results.capacity[target.key] = cap
        print(
            f"  {target.key:<13} capacity: {cap['flowing']}/{cap['streams']} streams flowing, "
            f"errors {cap['errors'] or 'none'}, RSS {cap['rss_open_mib']:.1f} MiB",
            flush=True,
        )


def _start_us(run: Run) -> float:
    """The gateway's CPU per request of a one-token load: the request start."""
    return run.gateway_seconds * 1e6 / max(run.requests, 1)


def _errors(run: Run) -> str:
    return f"  ERRORS ({len(run.errors)}): {run.errors[:2]}" if run.errors else ""


def _gateway_us_per_token(run: Run) -> float | None:
    """The gateway's CPU per relayed token over a run (None for a target with no process of its
    own: the direct baseline)."""
    if "gateway" not in run.cpu or not run.received:
        return None
    return run.cpu["gateway"] * 1e6 / run.tps


def _latency_line(run: Run) -> str:
    s = run.stats()
    return (
        f"TTFT p50 {s['ttft_ms']['p50']:7.2f} p99 {s['ttft_ms']['p99']:7.2f} ms | "
        f"ITL p50 {s['itl_ms']['p50']:6.2f} p99 {s['itl_ms']['p99']:6.2f} ms | "
        f"E2E p50 {s['e2e_ms']['p50']:8.1f} ms{_errors(run)}"
    )


def run_all(args: argparse.Namespace) -> Results:
    results = Results(
        meta={
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "argv": sys.argv[1:],
            "delay_ms": args.delay_ms,
            "tokens": args.tokens,
        }
    )
    models = sorted({f"fake-d{args.delay_ms:g}", "fake-d0", f"fake-d{args.hold_delay_ms:g}"})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # children inherit it: 1,000 streams need it
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        folder = Path(tmp)
        up_port = free_port()
        upstream = start(
            "upstream", [sys.executable, str(HERE / "fast_upstream.py"), "--port", str(up_port)], folder
        )
        procs = [upstream]
        servers: dict[str, tuple[Proc, int]] = {}
        try:
            wait_ready(upstream, f"http://127.0.0.1:{up_port}/health")
            for key in args.targets:
                try:
                    target = make_target(key, args, folder, up_port, models, results, procs, servers)
                except RuntimeError as exc:  # it would not start: say why, measure the others
                    results.skipped[key] = f"did not start: {exc}"
                    print(f"  {key:<13} SKIPPED: did not start: {exc}", flush=True)
                    continue
                if target is None:
                    continue
                measure_target(target, upstream, args, results)
                if target.proc is not None and not key.startswith("sg-"):  # one Sluicegate serves all three
                    target.proc.stop()
        finally:
            for proc in procs:
                proc.stop()
    return results


def make_target(
    key: str,
    args: argparse.Namespace,
    folder: Path,
    upstream: int,
    models: list[str],
    results: Results,
    procs: list[Proc],
    servers: dict[str, tuple[Proc, int]],
) -> Target | None:
    """Start what `key` needs (once per run: sg-chat and sg-responses share one server)."""

    def skip(why: str) -> None:
        results.skipped[key] = why
        print(f"  {key:<13} SKIPPED: {why}", flush=True)

    if key == "direct":
        return Target(key, upstream)
    if key == "sg-chat-nolane":
        if "sluicegate-nolane" not in servers:
            servers["sluicegate-nolane"] = start_sluicegate(
                folder, upstream, models, variant="nolane", env={"SLUICEGATE_FAST_LANE": "0"}
            )
            procs.append(servers["sluicegate-nolane"][0])
        proc, port = servers["sluicegate-nolane"]
        return Target(key, port, proc=proc)
    if key == "sg-chat-noyield":
        if "sluicegate-noyield" not in servers:
            servers["sluicegate-noyield"] = start_sluicegate(
                folder, upstream, models, variant="noyield", env={"SLUICEGATE_LANE_YIELDS": "0"}
            )
            procs.append(servers["sluicegate-noyield"][0])
        proc, port = servers["sluicegate-noyield"]
        return Target(key, port, proc=proc)
    if key == "sg-chat-pure":
        if "sluicegate-pure" not in servers:
            servers["sluicegate-pure"] = start_sluicegate(folder, upstream, models, pure=True)
            procs.append(servers["sluicegate-pure"][0])
        proc, port = servers["sluicegate-pure"]
        return Target(key, port, proc=proc)
    if key in ("sg-chat", "sg-responses", "sg-lmstudio", "sg-completions", "sg-ollama"):
        missing = sluicegate_missing()
        if missing:
            skip(f"Sluicegate cannot serve an upstream: {missing}")
            return None
        if "sluicegate" not in servers:
            redis_url = None
            if args.sluicegate_workers > 1:
                redis, redis_url = start_redis(folder)
                procs.append(redis)
            servers["sluicegate"] = start_sluicegate(
                folder, upstream, models, args.sluicegate_workers, redis_url
            )
            procs.append(servers["sluicegate"][0])
        proc, port = servers["sluicegate"]
        if key == "sg-responses":
            return Target(key, port, "/v1/responses", "responses", proc)
        if key == "sg-lmstudio":
            return Target(key, port, "/api/v1/chat", "lmstudio", proc)
        if key == "sg-completions":
            return Target(key, port, "/v1/completions", "completions", proc)
        if key == "sg-ollama":  # NDJSON
            return Target(key, port, "/api/chat", "ollama", proc)
        return Target(key, port, proc=proc)
    if key == "nginx":
        binary = find_nginx(args.nginx)
        if binary is None:
            skip(
                f"nginx not found ({args.nginx or 'PATH, /usr/sbin'}): install it (Debian: apt-get install nginx) or pass --nginx PATH"
            )
            return None
        proc, port = start_nginx(binary, folder, upstream, args.nginx_workers)
        procs.append(proc)
        return Target(key, port, proc=proc)
    if key in ("asgi-floor", "asgi-floor-stock", "asgi-static"):
        proc, port = start_asgi_floor(key, folder, upstream)
        procs.append(proc)
        return Target(key, port, proc=proc, answers=1 if key == "asgi-static" else 0)
    if key in ("py-floor", "py-lean"):
        proc, port = start_python_relay(key, folder, upstream)
        procs.append(proc)
        return Target(key, port, proc=proc)
    if key == "litellm":
        binary = find_litellm(args.litellm)
        if binary is None:
            skip(
                f"litellm not found ({args.litellm or 'PATH'}): pip install 'litellm[proxy]' "
                "(in a venv of its own) and pass --litellm PATH"
            )
            return None
        print("  litellm       starting (slow to import)...", flush=True)
        proc, port = start_litellm(binary, folder, upstream, models)
        procs.append(proc)
        return Target(key, port, proc=proc)
    raise ValueError(key)


# --- the report --------------------------------------------------------------------------------


def report(r: Results, args: argparse.Namespace) -> dict[str, Any]:
    base = r.latency.get("direct", {})
    out: dict[str, Any] = {
        "meta": r.meta,
        "skipped": r.skipped,
        "latency": {},
        "throughput": {},
        "memory": r.memory,
        "capacity": r.capacity,
    }
    print(
        f"\nLatency: {args.tokens} tokens per reply, {args.delay_ms:g} ms between tokens; "
        "added = target - (a), ratios = target / (a)"
    )
    print(
        f"  {'target':<26}{'c':>4}{'TTFT p50':>10}{'p99':>8}{'+p50':>8}{'+p99':>8}"
        f"{'ITL mean':>10}{'p99':>8}{'E2E p50':>9}{'x(a)':>7}{'gw µs/token':>13}"
    )
    for key, runs in r.latency.items():
        out["latency"][key] = {}
        for c, run in runs.items():
            s = run.stats()
            a = base[c].stats() if c in base else None
            added50 = s["ttft_ms"]["p50"] - a["ttft_ms"]["p50"] if a else float("nan")
            added99 = s["ttft_ms"]["p99"] - a["ttft_ms"]["p99"] if a else float("nan")
            e2e_ratio = s["e2e_ms"]["p50"] / a["e2e_ms"]["p50"] if a else float("nan")
            s["added_ttft_ms"] = {"p50": added50, "p99": added99}
            s["e2e_p50_vs_direct"] = e2e_ratio
            # Paced tokens arrive one per upstream read: what a relay costs per read, not per
            # token in bulk (the throughput run's reads carry several tokens each).
            paced = _gateway_us_per_token(run) if run.tokens > 1 else None  # one token: a start
            s["gateway_cpu_us_per_token"] = paced
            out["latency"][key][c] = s
            print(
                f"  {TITLES[key]:<26}{c:>4}{s['ttft_ms']['p50']:>10.2f}{s['ttft_ms']['p99']:>8.2f}"
                f"{added50:>8.2f}{added99:>8.2f}{s['itl_ms']['mean']:>10.2f}{s['itl_ms']['p99']:>8.2f}"
                f"{s['e2e_ms']['p50']:>9.1f}{e2e_ratio:>7.3f}"
                f"{paced if paced is not None else float('nan'):>13.1f}"
            )
    direct = r.throughput.get("direct")
    nginx = r.throughput.get("nginx")
    litellm = r.throughput.get("litellm")
    print(
        f"\nRelay throughput: {args.throughput_tokens} tokens per reply, no delay, concurrency "
        f"{args.throughput_concurrency}, {args.throughput_seconds:g} s; CPU in cores (1.0 = one core busy)"
    )
    print(
        f"  {'target':<26}{'tokens/s':>10}{'x(a)':>7}{'xnginx':>8}{'xLiteLLM':>10}"
        "   CPU: gateway upstream client   gateway µs/token"
    )
    for key, run in r.throughput.items():
        s = run.stats()
        ratios = {
            "vs_direct": run.tps / direct.tps if direct else None,
            "vs_nginx": run.tps / nginx.tps if nginx else None,
            "vs_litellm": run.tps / litellm.tps if litellm else None,
        }
        s.update(ratios)
        s["gateway_cpu_us_per_token"] = _gateway_us_per_token(run) or 0.0
        out["throughput"][key] = s

        def f(x: float | None, w: int) -> str:
            return f"{x:>{w}.3f}" if x is not None else " " * (w - 1) + "-"

        cpu = run.cpu
        print(
            f"  {TITLES[key]:<26}{run.tps:>10,.0f}{f(ratios['vs_direct'], 7)}{f(ratios['vs_nginx'], 8)}"
            f"{f(ratios['vs_litellm'], 10)}   {cpu.get('gateway', 0):>7.2f} {cpu.get('upstream', 0):>8.2f}"
            f" {cpu.get('client', 0):>6.2f}   {cpu.get('gateway', 0) * 1e6 / run.tps:>10.2f}{_errors(run)}"
        )
    chat = r.throughput.get("sg-chat")
    if chat is not None and _gateway_us_per_token(chat):
        print("\nGateway CPU per relayed token against Sluicegate chat's, same run (throughput; paced c=1)")
        for key, run in r.throughput.items():
            if key.startswith("sg-") and key != "sg-chat" and (mine := _gateway_us_per_token(run)):
                ratio = mine / (_gateway_us_per_token(chat) or 1.0)
                out["throughput"][key]["gateway_cpu_vs_chat"] = ratio
                paced = r.latency.get(key, {}).get(1)
                paced_chat = r.latency.get("sg-chat", {}).get(1)
                paced_ratio = float("nan")
                if paced is not None and paced_chat is not None:
                    paced_ratio = (_gateway_us_per_token(paced) or 0.0) / (
                        _gateway_us_per_token(paced_chat) or 1.0
                    )
                print(f"  {TITLES[key]:<26}x{ratio:.3f}   paced c=1: x{paced_ratio:.3f}")
    if r.memory:
        print(f"\nMemory: {args.hold_streams} open streams, {args.hold_delay_ms:g} ms between tokens")
        for key, mem in r.memory.items():
            print(
                f"  {TITLES[key]:<26}{mem['flowing']:>5} flowing  RSS {mem['rss_before_mib']:7.1f} → "
                f"{mem['rss_open_mib']:7.1f} MiB  {mem['kib_per_stream']:6.1f} KiB per stream, "
                f"{mem['kib_per_stream_marginal']:6.1f} marginal (the second half)"
            )
    if r.capacity:
        print(f"\nCapacity: {args.capacity_streams} concurrent streams held")
        for key, cap in r.capacity.items():
            print(f"  {TITLES[key]:<26}{cap['flowing']:>5} flowing  errors: {cap['errors'] or 'none'}")
    if r.starts:
        out["starts"] = {}
        ref = r.starts.get("nginx")
        print(
            f"\nRequest start: {args.start_requests} one-token requests, concurrency "
            f"{args.start_concurrency}; the gateway's CPU (user + system) per request"
        )
        for key, run in r.starts.items():
            us = _start_us(run)
            start_ratio = us / _start_us(ref) if ref is not None and _start_us(ref) else None
            out["starts"][key] = {
                "cpu_us": us,
                "vs_nginx": start_ratio,
                "requests": run.requests,
                "errors": run.errors[:5],
            }
            shown = f"{start_ratio:8.2f}x nginx" if start_ratio is not None else ""
            print(f"  {TITLES[key]:<26}{us:9.1f} µs{shown}{_errors(run)}")
    out["vs_nginx"] = against_nginx(out, max(args.concurrency))
    for key, why in r.skipped.items():
        print(f"\n  {TITLES[key]} skipped: {why}")
    return out


def against_nginx(out: dict[str, Any], c: int) -> dict[str, dict[str, float | None]]:
    """The issue's figures for every target beside nginx's, as ratios (printed as a table):
    request-start CPU, TTFT p50 and p99 and paced CPU per token at concurrency `c`, memory
    per flowing stream."""

    def figures(key: str) -> dict[str, float | None]:
        lat = out["latency"].get(key, {}).get(c, {})
        mem = out["memory"].get(key, {})
        return {
            "start_cpu_us": out.get("starts", {}).get(key, {}).get("cpu_us"),
            "ttft_p50_ms": lat.get("ttft_ms", {}).get("p50"),
            "ttft_p99_ms": lat.get("ttft_ms", {}).get("p99"),
            "paced_cpu_us_per_token": lat.get("gateway_cpu_us_per_token"),  # None for one token
            "kib_per_stream": mem.get("kib_per_stream"),
        }

    keys = [k for k in out["latency"] if k != "direct"]
    if "nginx" not in keys:
        return {}
    ref = figures("nginx")
    table: dict[str, dict[str, float | None]] = {}
    names = ("start_cpu_us", "ttft_p50_ms", "ttft_p99_ms", "paced_cpu_us_per_token", "kib_per_stream")
    print(f"\nAgainst nginx, same run (c = {c} for TTFT and paced CPU): figure (x nginx)")
    print(
        f"  {'target':<26}{'start CPU µs':>20}{'TTFT p50 ms':>20}{'TTFT p99 ms':>20}{'paced µs/token':>20}{'KiB/stream':>20}"
    )
    for key in keys:
        mine = figures(key)
        row: dict[str, float | None] = dict(mine)
        cells = []
        for name in names:
            value, base = mine[name], ref[name]
            ratio = value / base if value is not None and base else None
            row[f"{name}_vs_nginx"] = ratio
            cell = (
                "-" if value is None else f"{value:.1f}" + (f" ({ratio:.2f}x)" if ratio is not None else "")
            )
            cells.append(f"{cell:>20}")
        table[key] = row
        print(f"  {TITLES[key]:<26}{''.join(cells)}")
    return table


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures over several runs: median (min-max)."""

    def show(x: dict[str, float], digits: int) -> str:
        return f"{x['median']:.{digits}f} ({x['min']:.{digits}f}-{x['max']:.{digits}f})"

    out: dict[str, Any] = {"latency": {}, "throughput": {}, "memory": {}}
    print(f"\nMedians of {len(runs)} runs (min-max)")
    print(
        f"  {'target':<26}{'c':>4}  {'added TTFT p50 ms':<22}{'added TTFT p99 ms':<22}{'E2E p50 x(a)':<22}"
        "gateway µs/token, paced"
    )
    for key in runs[0]["latency"]:
        out["latency"][key] = {}
        for c in runs[0]["latency"][key]:
            stats = [r["latency"][key][c] for r in runs if c in r["latency"].get(key, {})]
            row = {
                "added_ttft_p50_ms": spread([s["added_ttft_ms"]["p50"] for s in stats]),
                "added_ttft_p99_ms": spread([s["added_ttft_ms"]["p99"] for s in stats]),
                "e2e_p50_vs_direct": spread([s["e2e_p50_vs_direct"] for s in stats]),
            }
            paced = [s["gateway_cpu_us_per_token"] for s in stats if s.get("gateway_cpu_us_per_token")]
            if paced:
                row["gateway_cpu_us_per_token"] = spread(paced)
            out["latency"][key][c] = row
            print(
                f"  {TITLES[key]:<26}{c:>4}  {show(row['added_ttft_p50_ms'], 2):<22}"
                f"{show(row['added_ttft_p99_ms'], 2):<22}{show(row['e2e_p50_vs_direct'], 3):<22}"
                f"{show(row['gateway_cpu_us_per_token'], 1) if paced else '-'}"
            )
    print(f"\n  {'target':<26}{'tokens/s':<28}{'x nginx':<22}{'x LiteLLM':<22}gateway µs/token")
    for key in runs[0]["throughput"]:
        stats = [r["throughput"][key] for r in runs if key in r["throughput"]]
        row = {
            name: spread([s[name] for s in stats if s.get(name) is not None])
            for name in (
                "tokens_per_second",
                "vs_direct",
                "vs_nginx",
                "vs_litellm",
                "gateway_cpu_us_per_token",
            )
            if any(s.get(name) is not None for s in stats)
        }
        out["throughput"][key] = row
        cells = [show(row[n], d) if n in row else "-" for n, d in (("vs_nginx", 3), ("vs_litellm", 1))]
        print(
            f"  {TITLES[key]:<26}{show(row['tokens_per_second'], 0):<28}{cells[0]:<22}{cells[1]:<22}"
            f"{show(row['gateway_cpu_us_per_token'], 2)}"
        )
    for key in runs[0].get("starts", {}):
        values = [r["starts"][key]["cpu_us"] for r in runs if key in r.get("starts", {})]
        ratios = [
            r["starts"][key]["vs_nginx"] for r in runs if r.get("starts", {}).get(key, {}).get("vs_nginx")
        ]
        out.setdefault("starts", {})[key] = {
            "cpu_us": spread(values),
            **({"vs_nginx": spread(ratios)} if ratios else {}),
        }
        print(
            f"  {TITLES[key]:<26} request start {show(spread(values), 1)} µs of CPU"
            + (f", {show(spread(ratios), 2)} x nginx" if ratios else "")
        )
    for key in runs[0]["memory"]:
        row = spread([r["memory"][key]["kib_per_stream"] for r in runs if key in r["memory"]])
        marginal = spread([r["memory"][key]["kib_per_stream_marginal"] for r in runs if key in r["memory"]])
        out["memory"][key] = {"kib_per_stream": row, "kib_per_stream_marginal": marginal}
        print(
            f"  {TITLES[key]:<26} memory per open stream {show(row, 1)} KiB, marginal {show(marginal, 1)} KiB"
        )
    if runs[0].get("vs_nginx"):
        print("\n  against nginx, each run's ratio: median (min-max)")
        out["vs_nginx"] = {}
        for key, row in runs[0]["vs_nginx"].items():
            out["vs_nginx"][key] = {}
            cells = []
            for name in [n for n in row if n.endswith("_vs_nginx")]:
                values = [r["vs_nginx"][key][name] for r in runs if r["vs_nginx"].get(key, {}).get(name)]
                if values:
                    out["vs_nginx"][key][name] = spread(values)
                    cells.append(f"{name.removesuffix('_vs_nginx')} {show(spread(values), 2)}")
            print(f"  {TITLES[key]:<26} {'; '.join(cells)}")
    for key in runs[0].get("capacity", {}):
        caps = [r["capacity"][key] for r in runs if key in r.get("capacity", {})]
        out.setdefault("capacity", {})[key] = {
            "flowing": [c["flowing"] for c in caps],
            "errors": [e for c in caps for e in c["errors"]],
        }
        print(
            f"  {TITLES[key]:<26} capacity: flowing {[c['flowing'] for c in caps]} of {caps[0]['streams']}"
            f", errors {[e for c in caps for e in c['errors']] or 'none'}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--targets",
        default="direct,sg-chat,sg-responses,sg-lmstudio,sg-completions,sg-ollama,nginx,litellm",
        help="comma-separated, in order",
    )
    parser.add_argument("--delay-ms", type=float, default=5.0, help="inter-token delay for the latency runs")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per reply in the latency runs")
    parser.add_argument("--concurrency", default="1,16,64", help="latency-run concurrencies")
    parser.add_argument("--requests-c1", type=int, default=40, help="requests at concurrency 1")
    parser.add_argument(
        "--waves", type=int, default=3, help="requests = concurrency x waves above concurrency 1"
    )
    parser.add_argument("--throughput-tokens", type=int, default=2000)
    parser.add_argument("--throughput-concurrency", type=int, default=16)
    parser.add_argument("--throughput-seconds", type=float, default=4.0, help="length of the throughput run")
    parser.add_argument(
        "--hold-streams", type=int, default=500, help="open streams for the memory figure (0: skip)"
    )
    parser.add_argument(
        "--capacity-streams",
        type=int,
        default=2000,
        help="concurrent streams the hold targets must all keep flowing (0: skip)",
    )
    parser.add_argument(
        "--hold-delay-ms", type=float, default=1000.0, help="inter-token delay of the held streams"
    )
    parser.add_argument("--hold-settle", type=float, default=2.0, help="seconds to wait before reading RSS")
    parser.add_argument(
        "--hold-targets", default="sg-chat,nginx,litellm", help="targets whose memory is measured"
    )
    parser.add_argument("--nginx", help="nginx binary (default: found on PATH or in /usr/sbin)")
    parser.add_argument(
        "--nginx-workers", type=int, default=1, help="nginx worker processes (1: like one Python process)"
    )
    parser.add_argument(
        "--sluicegate-workers",
        type=int,
        default=1,
        help="Sluicegate's [server] workers (> 1 starts a redis-server for its store)",
    )
    parser.add_argument("--litellm", help="litellm CLI (default: found on PATH)")
    parser.add_argument("--json", default="gateway-bench.json", help="where to write the results")
    parser.add_argument(
        "--start-requests",
        type=int,
        default=2000,
        help="one-token requests per target for the request-start CPU (0: skip)",
    )
    parser.add_argument("--start-concurrency", type=int, default=16, help="of the request-start load")
    parser.add_argument("--runs", type=int, default=1, help="whole runs back to back; medians at the end")
    args = parser.parse_args()
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = set(args.targets) - set(TITLES)
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.hold_targets = set(args.hold_targets.split(","))
    print(
        f"Gateway bench: python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs"
    )
    started = time.perf_counter()
    runs = []
    for i in range(args.runs):
        if args.runs > 1:
            print(f"\n=== run {i + 1} of {args.runs}", flush=True)
        runs.append(report(run_all(args), args))
    out = runs[0] if args.runs == 1 else {"runs": runs, "median": summarize(runs)}
    Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"\nresults: {args.json}  ({time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
