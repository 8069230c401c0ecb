"""CPU per paced token (or per request start), this tree against another, loaded together.

    python bench/paced_ab.py --baseline /path/to/other/src [--rounds 4] [--tokens 64]
        [--concurrency 64] [--nolane]

On a shared machine CPU seconds move with the load, so the two Sluicegates (this tree's, and
one running `--baseline`'s code through PYTHONPATH) are loaded at the same time, each by its
own client (`bench/load_client.py`), and compared round by round: the A/B figure is the median
of the per-round ratios. The fake upstream paces `--tokens` tokens 5 ms apart (`fake-d5`, one
token per read: the paced case of `gateway.py`); with `--tokens 1` each request is its start.
Also printed: the share of upstream reads the fast lane carried (its /metrics counter).
`--nolane` runs both with SLUICEGATE_FAST_LANE=0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from gateway_targets import cpu_seconds, free_port, start, start_sluicegate, wait_ready

HERE = Path(__file__).resolve().parent


def lane_reads(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("sluicegate_fast_lane_reads_total"):
                return float(line.split()[-1])
    return 0.0


def load_together(
    servers: list[tuple[int, list[int]]], body: str, requests: int, concurrency: int
) -> list[float]:
    """CPU seconds of each server over its own client's run, all started on one word."""
    clients = []
    for port, _ in servers:
        cmd = [sys.executable, str(HERE / "load_client.py"), "run", "--port", str(port), "--body", body]
        cmd += ["--concurrency", str(concurrency), "--requests", str(requests)]
        out = tempfile.NamedTemporaryFile(suffix=".json")  # noqa: SIM115 - closed below
        client = subprocess.Popen(
            [*cmd, "--out", out.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        clients.append((client, out))
    for client, _ in clients:
        client.stdout.readline()  # type: ignore[union-attr]
    before = [cpu_seconds(pids) for _, pids in servers]
    for client, _ in clients:
        client.stdin.write(b"go\n")  # type: ignore[union-attr]
        client.stdin.flush()  # type: ignore[union-attr]
    cpu = []
    for (client, out), (_, pids), b in zip(clients, servers, before, strict=True):
        client.stdout.readline()  # type: ignore[union-attr]  # DONE
        cpu.append(cpu_seconds(pids) - b)
        _, err = client.communicate(timeout=120)
        if client.returncode != 0:
            raise RuntimeError(err.decode()[-2000:])
        streams = json.loads(Path(out.name).read_bytes())["streams"]
        out.close()
        bad = [s for s in streams if s["error"]]
        if bad or len(streams) != requests:
            raise RuntimeError(f"{len(bad)} bad streams of {len(streams)}")
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--waves", type=int, default=4, help="requests = concurrency x waves")
    parser.add_argument("--nolane", action="store_true")
    args = parser.parse_args()
    model = "fake-d5" if args.tokens > 1 else "fake-d0"
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": args.tokens,
        }
    )
    requests = args.concurrency * args.waves
    units = requests * args.tokens
    extra = {"SLUICEGATE_FAST_LANE": "0"} if args.nolane else {}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        up_port = free_port()
        upstream = start(
            "upstream", [sys.executable, str(HERE / "fast_upstream.py"), "--port", str(up_port)], folder
        )
        procs = []
        try:
            wait_ready(upstream, f"http://127.0.0.1:{up_port}/health")
            this, this_port = start_sluicegate(folder, up_port, [model], env=extra)
            procs.append(this)
            base, base_port = start_sluicegate(
                folder, up_port, [model], variant="baseline", env={**extra, "PYTHONPATH": args.baseline}
            )
            procs.append(base)
            for proc, port in ((this, this_port), (base, base_port)):
                wait_ready(proc, f"http://127.0.0.1:{port}/health")
            servers = [(this_port, this.pids()), (base_port, base.pids())]
            load_together(servers, body, args.concurrency, args.concurrency)  # warm up
            lanes0 = [lane_reads(p) for p, _ in servers]
            rows = []
            for r in range(args.rounds):
                order = servers if r % 2 == 0 else servers[::-1]
                cpu = load_together(order, body, requests, args.concurrency)
                if r % 2:
                    cpu = cpu[::-1]
                us = [c * 1e6 / units for c in cpu]
                rows.append(us)
                print(
                    f"round {r + 1}: this {us[0]:7.1f}  baseline {us[1]:7.1f}  this/baseline {us[0] / us[1]:.3f}"
                )
            lanes = [
                (lane_reads(p) - l0) / (args.rounds * requests * (args.tokens + 3))
                for (p, _), l0 in zip(servers, lanes0, strict=True)
            ]
        finally:
            for proc in procs:
                proc.stop()
            upstream.stop()
    unit = "paced token" if args.tokens > 1 else "request"
    this_us = [r[0] for r in rows]
    base_us = [r[1] for r in rows]
    ratios = [r[0] / r[1] for r in rows]
    print(
        f"\nCPU µs per {unit} (median, min-max of {args.rounds} rounds; load average now "
        f"{os.getloadavg()[0]:.2f}):"
    )
    print(
        f"  this     {statistics.median(this_us):7.1f} ({min(this_us):.1f}-{max(this_us):.1f})  lane share {lanes[0]:.2f}"
    )
    print(
        f"  baseline {statistics.median(base_us):7.1f} ({min(base_us):.1f}-{max(base_us):.1f})  lane share {lanes[1]:.2f}"
    )
    print(f"  this/baseline {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
