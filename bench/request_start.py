"""CPU per request start: what a one-token streamed request costs a running Sluicegate, against
nginx relaying the same request, in one script.

    python bench/request_start.py [--requests 2000] [--concurrency 16] [--rounds 3]
        [--baseline /work/main/src] [--profile] [--seconds 8]

Processes (each its own, started from generated configs in a temp dir, like `bench/gateway.py`):
the fake upstream (`bench/fast_upstream.py`), `sluicegate serve` with this tree's code
(`engine = "openai"` → the upstream), optionally a second Sluicegate with `--baseline`'s code
(`PYTHONPATH=<baseline>`, e.g. main's `src`: an A/B of a change in one run), and nginx as the
reference relay (`proxy_buffering off`, one worker).

Each round runs every target in turn: `--requests` Chat Completions requests with
`max_tokens = 1` (the upstream answers one token: role chunk, token, finish, usage, `[DONE]`),
`--concurrency` at a time over keep-alive connections (`bench/load_client.py`). The server's
user + system CPU time is read from /proc over the client's run, divided by the requests:
CPU µs per request start. The whole request is the start here: its one token is the first.
Load on the machine moves wall-clock figures a lot and this one little, so it is the headline.
Printed per target: median (min-max) over the rounds, and its ratio to nginx's; with
`--baseline`, the ratio this/baseline of each round and their median (the A/B figure: both
servers see the same load within a round).

`--profile`: afterwards, py-spy (`--nonblocking`, 200 Hz) records this tree's Sluicegate under
the same load for `--seconds`; printed: self time by function, and the inclusive share of the
request's phases (a sample counts to a phase when the phase's function is on its stack), each
as a share of samples and as µs of CPU per request.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gateway_targets import (
    Proc,
    cpu_seconds,
    find_nginx,
    free_port,
    start,
    start_nginx,
    start_sluicegate,
    wait_ready,
)

HERE = Path(__file__).resolve().parent
MODEL = "fake-d0"
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1,
    }
)
# Phases of a request start (py-spy frame names), in the order a request meets them.
PHASES = [
    ("uvicorn: parse, ASGI call", "httptools_impl.py"),
    ("app: SluicegateApp + middleware", "SluicegateApp.__call__"),
    ("TurnEndpoint._serve (all of the turn)", "TurnEndpoint._serve"),
    ("  read_json", "read_json"),
    ("  dialect parse (chat)", "chat_completions/request.py"),
    ("  TurnEndpoint.prepare", "TurnEndpoint.prepare"),
    ("  engine: _send (replica, request out)", "_send (sluicegate/engines/upstream/base.py"),
    ("  request_body", "request_body.py"),
    ("  upstream http (pool, connection)", "engines/upstream/http.py"),
    ("  pipeline (turn/pipeline.py)", "turn/pipeline.py"),
    ("  transport (SSE, answer first)", "sluicegate/transport/"),
    ("observe/ (logs, metrics, requests)", "sluicegate/observe/"),
    ("uvicorn send (socket writes)", "RequestResponseCycle.send"),
]


def user_system(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of these processes (/proc)."""
    user = system = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11]) / os.sysconf("SC_CLK_TCK")
        system += int(fields[12]) / os.sysconf("SC_CLK_TCK")
    return user, system


def load(
    port: int, pids: list[int], requests: int, concurrency: int, duration: float = 0.0
) -> dict[str, float]:
    """One load-client run; the server's CPU over it (read around the client's run, on its word)."""
    cmd = [
        sys.executable, str(HERE / "load_client.py"), "run",
        "--port", str(port), "--body", BODY,
        "--concurrency", str(concurrency), "--requests", str(requests), "--duration", str(duration),
    ]  # fmt: skip
    with tempfile.NamedTemporaryFile(prefix="start-", suffix=".json") as result:
        client = subprocess.Popen(
            [*cmd, "--out", result.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert client.stdin is not None and client.stdout is not None
        ready = client.stdout.readline()
        before = user_system(pids)
        client.stdin.write(b"go\n")
        client.stdin.flush()
        client.stdout.readline()  # DONE
        after = user_system(pids)
        user, system = after[0] - before[0], after[1] - before[1]
        _, err = client.communicate(timeout=60)
        if client.returncode != 0 or not ready.startswith(b"CONNECTED"):
            raise RuntimeError(f"load client failed:\n{err.decode()[-3000:]}")
        out = json.loads(Path(result.name).read_bytes())
    streams = out["streams"]
    bad = [s for s in streams if s["error"] or s["tokens"] != 1]
    if bad:
        raise RuntimeError(f"{len(bad)} bad streams, e.g. {bad[0]}")
    ttft = sorted(s["ttft"] for s in streams)
    return {
        "requests": len(streams),
        "cpu_us": (user + system) * 1e6 / len(streams),
        "system_us": system * 1e6 / len(streams),
        "ttft_p50_ms": ttft[len(ttft) // 2] * 1e3,
        "wall": out["wall"],
    }


def profile(
    port: int,
    pid: int,
    concurrency: int,
    seconds: float,
    top: int,
    py_spy: str,
    native: bool,
    save: str | None,
) -> None:
    cmd = [sys.executable, str(HERE / "load_client.py"), "run", "--port", str(port), "--body", BODY]
    cmd += ["--concurrency", str(concurrency), "--requests", "0", "--duration", str(seconds + 2)]
    client = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert client.stdin is not None and client.stdout is not None
    client.stdout.readline()  # CONNECTED
    client.stdin.write(b"go\n")
    client.stdin.flush()
    time.sleep(1.0)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profile.txt"
        before = cpu_seconds([pid])
        started = time.perf_counter()
        record = [py_spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200", "-f", "raw"]
        record += ["-o", str(raw), "--native" if native else "--nonblocking"]
        subprocess.run(
            record,
            check=True,
            capture_output=True,
        )
        cpu = cpu_seconds([pid]) - before
        window = time.perf_counter() - started
        lines = raw.read_text().splitlines()
        if save:
            Path(save).write_text(raw.read_text())
    out = json.loads(client.communicate(timeout=60)[0].splitlines()[-1])
    done = len(out["streams"]) / out["wall"] * window
    per_request = cpu * 1e6 / max(done, 1)
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    phases: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        samples = int(n)
        total += samples
        frames = [re.sub(r":\d+\)", ")", f) for f in stack.split(";")]
        own[frames[-1]] += samples
        for name in set(frames):
            inclusive[name] += samples
        for phase, needle in PHASES:
            if any(needle in f for f in frames):
                phases[phase] += samples
    print(
        f"\nprofile: {len(out['streams'])} requests in {out['wall']:.1f} s; server CPU {cpu:.2f} s over {window:.1f} s"
    )
    print(f"  {per_request:.0f} µs of CPU per request (py-spy running)\n")
    print("phase (inclusive)                          share   µs/request")
    for phase, _ in PHASES:
        share = phases[phase] / max(total, 1)
        print(f"  {phase:<40} {share:6.1%}  {share * per_request:6.0f}")
    print("\nself time, top functions:")
    for name, samples in own.most_common(top):
        print(f"  {samples / total:6.1%}  {samples / total * per_request:5.0f} µs  {name[:110]}")
    print("\ninclusive, top sluicegate functions:")
    ours = [(k, v) for k, v in inclusive.items() if "sluicegate/" in k]
    for name, samples in sorted(ours, key=lambda kv: -kv[1])[:top]:
        print(f"  {samples / total:6.1%}  {samples / total * per_request:5.0f} µs  {name[:110]}")


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every target once, in turn")
    parser.add_argument("--baseline", help="a second Sluicegate with PYTHONPATH=<this> (e.g. /work/main/src)")
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument("--nginx", help="nginx binary (default: PATH, /usr/sbin)")
    parser.add_argument("--profile", action="store_true", help="then a py-spy profile of this tree's server")
    parser.add_argument("--seconds", type=float, default=8.0, help="--profile: how long to record")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--native", action="store_true", help="--profile: with native frames (pauses per sample)"
    )
    parser.add_argument("--save", help="--profile: keep py-spy's raw stacks in this file")
    parser.add_argument("--py-spy", default="py-spy")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="request-start-") as tmp:
        folder = Path(tmp)
        up_port = free_port()
        upstream = start(
            "upstream", [sys.executable, str(HERE / "fast_upstream.py"), "--port", str(up_port)], folder
        )
        procs: list[Proc] = [upstream]
        try:
            wait_ready(upstream, f"http://127.0.0.1:{up_port}/health")
            targets: dict[str, tuple[Proc, int]] = {}
            here = folder / "this"
            here.mkdir()
            targets["sluicegate"] = start_sluicegate(here, up_port, [MODEL])
            procs.append(targets["sluicegate"][0])
            if args.baseline:
                base = folder / "base"
                base.mkdir()
                targets["baseline"] = start_sluicegate(
                    base, up_port, [MODEL], env={"PYTHONPATH": args.baseline}
                )
                procs.append(targets["baseline"][0])
            binary = None if args.no_nginx else find_nginx(args.nginx)
            if binary:
                nginx = folder / "ng"
                nginx.mkdir()
                targets["nginx"] = start_nginx(binary, nginx, up_port, 1)
                procs.append(targets["nginx"][0])
            elif not args.no_nginx:
                print("nginx not found: no reference (Debian: apt-get install nginx)")
            for proc, port in targets.values():  # warm up: connections, first-call costs
                load(port, proc.pids(), 200, args.concurrency)
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in targets}
            for r in range(args.rounds):
                for key, (proc, port) in targets.items():
                    run = load(port, proc.pids(), args.requests, args.concurrency)
                    runs[key].append(run)
                    print(
                        f"round {r + 1} {key:<10} {run['cpu_us']:7.0f} µs CPU/request ({run['system_us']:.0f} system)  "
                        f"TTFT p50 {run['ttft_p50_ms']:.2f} ms  ({run['requests']} in {run['wall']:.1f} s)",
                        flush=True,
                    )
            print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(
                f"\nCPU µs per request, c = {args.concurrency}, {args.requests} one-token requests, {args.rounds} rounds"
            )
            print("target        median (min-max)    / nginx")
            ref = [x["cpu_us"] for x in runs.get("nginx", [])]
            for key, values in runs.items():
                cpu = [x["cpu_us"] for x in values]
                ratio = f"{statistics.median(cpu) / statistics.median(ref):6.1f}x" if ref else ""
                print(f"  {key:<10} {summary(cpu)}  {ratio}")
            if args.baseline:
                pairs = [
                    a["cpu_us"] / b["cpu_us"]
                    for a, b in zip(runs["sluicegate"], runs["baseline"], strict=True)
                ]
                print(f"  this / baseline, per round: {', '.join(f'{p:.3f}' for p in pairs)}")
                print(f"  this / baseline, median of the rounds: {statistics.median(pairs):.3f}")
            if args.profile:
                proc, port = targets["sluicegate"]
                profile(
                    port,
                    proc.popen.pid,
                    args.concurrency,
                    args.seconds,
                    args.top,
                    args.py_spy,
                    args.native,
                    args.save,
                )
        finally:
            for proc in procs:
                proc.stop()


if __name__ == "__main__":
    main()
