"""CPU per request start: what a one-token streamed request costs a running Sluicegate, against
nginx relaying the same request, in one script.

    python bench/request_start.py [--requests 2000] [--concurrency 16] [--rounds 3]
        [--baseline /work/main/src] [--profile] [--seconds 8]

Processes (each its own, started from generated configs in a temp dir, like `bench/gateway.py`):
the fake upstream (`bench/fast_upstream.py`), `sluicegate serve` with this tree's code
(`engine = "openai"` → the upstream), optionally a second Sluicegate with `--baseline`'s code
(`PYTHONPATH=<baseline>`, e.g. main's `src`: an A/B of a change in one run), and nginx as the
reference relay (`proxy_buffering off`, one worker).

Each round: `--requests` Chat Completions requests with `max_tokens = 1` (the upstream answers
one token: role chunk, token, finish, usage, `[DONE]`), `--concurrency` at a time over
keep-alive connections (`bench/load_client.py`), to each target. The server's user + system CPU
time is read from /proc over its client's run and divided by the requests: CPU µs per request
start (the whole request is the start here: its one token is the first). Load on the machine
moves wall-clock figures a lot and this one less, so it is the headline. With `--baseline` the
two Sluicegates are loaded at the same time, each by its own client, so that the rest of the
machine weighs on both alike; nginx runs alone after them. Printed per target: median (min-max)
over the rounds and its ratio to nginx's; with `--baseline`, this/baseline per round and the
median of those ratios (the A/B figure).

`--profile`: afterwards, py-spy (`--nonblocking`, 200 Hz; `--native` for C frames) records
this tree's Sluicegate under the same load for `--seconds`. Each sample is charged to the
innermost Sluicegate function on its stack (library code counts to its caller) and grouped:
the request's start, its one token's stream, its end, socket writes, the event loop. Printed as
shares of samples and µs of CPU per request, with the top functions of each group.
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
from profile_gateway import start_load

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
# Where a sample's time goes: to the innermost Sluicegate function on its stack (library code
# it called counts to it), grouped by what that function does for a request.
WRITES = ("RequestResponseCycle.send", "_Connection.start")  # their self time: the write syscall
STREAM = (
    "transport/stream.py", "turn/pipeline.py", "core/segment", "parsing/", "engines/upstream/wire.py",
    "encoder.py", "transport/sse.py", "core/accumulate.py", "Instance._run", "UpstreamEngine._generate",
    "_Chunks", "_Connection.read", "_Connection.data_received", "EventTap.see", "_Admitted", "_Resumed",
    "core/deadlines.py",
)  # fmt: skip
END = (
    "_drain", "owned.py", "RequestObserver.end", "_flush_gaps", "EventTap.end", "generation_ended",
    "_close", "aclose", "_count_tokens", "_settle",
)  # fmt: skip
AREAS = {
    "start": "request start, ours (HTTP parse via our protocol, parse, prepare, admission, "
    "upstream request, answer wait, observer)",
    "stream": "the one token's stream (upstream read → events → frames → outbox)",
    "end": "request end (body end, releases, observer end, metrics)",
    "writes": "socket writes (uvicorn send, the upstream request): see below",
    "loop": "event loop (uvloop run, epoll, callbacks in C)",
    "outside": "uvicorn and asyncio outside any Sluicegate frame",
}


def area_of(frames: list[str]) -> tuple[str, str]:
    """(area, the function charged) of one sample's stack."""
    leaf = frames[-1]
    if any(w in leaf for w in WRITES):
        return "writes", leaf
    if leaf.startswith(("Runner.run", "run (uvicorn")) or "epoll" in leaf:
        return "loop", leaf
    ours = [
        f
        for f in frames
        if "sluicegate/" in f and not f.endswith(("main.py)", "__main__.py)", "serving.py)"))
    ]
    if not ours:
        return "outside", leaf
    charged = ours[-1]
    if any(k in charged for k in END):
        return "end", charged
    if any(k in charged for k in STREAM):
        return "stream", charged
    return "start", charged


def user_system(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of these processes (/proc)."""
    user = system = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11]) / os.sysconf("SC_CLK_TCK")
        system += int(fields[12]) / os.sysconf("SC_CLK_TCK")
    return user, system


def load(servers: list[tuple[int, list[int]]], requests: int, concurrency: int) -> list[dict[str, float]]:
    """One load-client run per server, all started on the same word (so servers measured
    together share the machine's load); each server's CPU over its client's run."""
    clients = []
    for port, _ in servers:
        cmd = [sys.executable, str(HERE / "load_client.py"), "run", "--port", str(port), "--body", BODY]
        cmd += ["--concurrency", str(concurrency), "--requests", str(requests)]
        result = tempfile.NamedTemporaryFile(prefix="start-", suffix=".json")  # noqa: SIM115 - closed below
        client = subprocess.Popen(
            [*cmd, "--out", result.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        clients.append((client, result))
    readies = [client.stdout.readline() for client, _ in clients]  # type: ignore[union-attr]
    before = [user_system(pids) for _, pids in servers]
    for client, _ in clients:
        client.stdin.write(b"go\n")  # type: ignore[union-attr]
        client.stdin.flush()  # type: ignore[union-attr]
    after: list[tuple[float, float] | None] = [None] * len(servers)
    for i, (client, _) in enumerate(clients):
        client.stdout.readline()  # type: ignore[union-attr]  # DONE
        after[i] = user_system(servers[i][1])
    runs = []
    for (client, result), ready, b, a in zip(clients, readies, before, after, strict=True):
        _, err = client.communicate(timeout=60)
        if client.returncode != 0 or not ready.startswith(b"CONNECTED"):
            raise RuntimeError(f"load client failed:\n{err.decode()[-3000:]}")
        out = json.loads(Path(result.name).read_bytes())
        result.close()
        assert a is not None
        user, system = a[0] - b[0], a[1] - b[1]
        streams = out["streams"]
        bad = [s for s in streams if s["error"] or s["tokens"] != 1]
        if bad:
            raise RuntimeError(f"{len(bad)} bad streams, e.g. {bad[0]}")
        ttft = sorted(s["ttft"] for s in streams)
        runs.append(
            {
                "requests": len(streams),
                "cpu_us": (user + system) * 1e6 / len(streams),
                "system_us": system * 1e6 / len(streams),
                "ttft_p50_ms": ttft[len(ttft) // 2] * 1e3,
                "wall": out["wall"],
            }
        )
    return runs


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
    client = start_load(port, BODY, concurrency, seconds)
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
    areas: collections.Counter[str] = collections.Counter()
    charged: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        samples = int(n)
        total += samples
        area, function = area_of([re.sub(r":\d+\)", ")", f) for f in stack.split(";")])
        areas[area] += samples
        charged[area][function] += samples
    print(
        f"\nprofile: {len(out['streams'])} requests in {out['wall']:.1f} s; server CPU {cpu:.2f} s over {window:.1f} s"
    )
    print(f"  {per_request:.0f} µs of CPU per request (py-spy running)\n")
    print("share of samples (µs/request at that share)")
    for area, samples in areas.most_common():
        print(f"  {samples / total:6.1%} {samples / total * per_request:6.0f}  {AREAS[area]}")
    print(
        "\n(py-spy counts a thread that is runnable but not running as busy: a write that wakes its\n"
        "reader can lose the core inside the syscall, so `writes` overstates CPU; compare the system\n"
        "CPU per request in the runs above.)"
    )
    for area in ("start", "end", "stream"):
        print(f"\n{AREAS[area]}, top functions (self time plus the library code they call):")
        for name, samples in charged[area].most_common(top):
            print(f"  {samples / total:6.1%} {samples / total * per_request:5.0f} µs  {name[:100]}")


def serve_counted(out: str, argv: list[str]) -> None:
    """Run `sluicegate <argv>` with cProfile switched on by SIGUSR1 and written to `out` by
    SIGUSR2 (`--calls`)."""
    import cProfile
    import signal

    from sluicegate.cli.main import main as sluicegate

    profiler = cProfile.Profile()

    def dump(*_: object) -> None:  # written whole, then renamed: the reader never sees a part
        profiler.disable()
        profiler.dump_stats(out + ".part")
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["sluicegate", *argv]
    sluicegate()


def count_calls(
    folder: Path, upstream: int, env: dict[str, str] | None, requests: int, concurrency: int
) -> float:
    """Python function calls per request (cProfile's count: builtins and library code
    included) in a server of its own: a count, which load does not move."""
    import pstats
    import signal

    folder.mkdir()
    out = folder / "calls.prof"
    launcher = [sys.executable, str(Path(__file__).resolve()), "--serve-counted", str(out), "--"]
    proc, port = start_sluicegate(folder, upstream, [MODEL], env=env, launcher=launcher)
    try:
        load([(port, proc.pids())], 200, concurrency)  # warm up
        os.kill(proc.popen.pid, signal.SIGUSR1)
        load([(port, proc.pids())], 200, concurrency)  # the switch is on by now
        os.kill(proc.popen.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        before = sum(v[1] for v in pstats.Stats(str(out)).stats.values())  # type: ignore[attr-defined]
        out.unlink()
        os.kill(proc.popen.pid, signal.SIGUSR1)
        done = load([(port, proc.pids())], requests, concurrency)[0]["requests"]
        os.kill(proc.popen.pid, signal.SIGUSR2)
        while not out.exists() and time.monotonic() < deadline + 60:
            time.sleep(0.1)
        after = sum(v[1] for v in pstats.Stats(str(out)).stats.values())  # type: ignore[attr-defined]
    finally:
        proc.stop()
    return (after - before) / done


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
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--native", action="store_true", help="--profile: with native frames (pauses per sample)"
    )
    parser.add_argument("--save", help="--profile: keep py-spy's raw stacks in this file")
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument(
        "--calls",
        action="store_true",
        help="also count Python calls per request (cProfile), this and baseline",
    )
    if sys.argv[1:2] == ["--serve-counted"]:  # the wrapper `--calls` starts a server with
        serve_counted(sys.argv[2], sys.argv[4:])
        return
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
                load([(port, proc.pids())], 200, args.concurrency)
            # With --baseline, the two Sluicegates run at once (each its own client): whatever
            # else the machine does weighs on both alike. nginx runs alone after them.
            groups = [["sluicegate", "baseline"]] if args.baseline else [["sluicegate"]]
            groups += [["nginx"]] if "nginx" in targets else []
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in targets}
            for r in range(args.rounds):
                for group in groups:
                    servers = [(targets[k][1], targets[k][0].pids()) for k in group]
                    for key, run in zip(group, load(servers, args.requests, args.concurrency), strict=True):
                        runs[key].append(run)
                        print(
                            f"round {r + 1} {key:<10} {run['cpu_us']:7.0f} µs CPU/request "
                            f"({run['system_us']:.0f} system)  TTFT p50 {run['ttft_p50_ms']:.2f} ms  "
                            f"({run['requests']} in {run['wall']:.1f} s)",
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
            if args.calls:
                for key, env in [
                    ("sluicegate", None),
                    *([("baseline", {"PYTHONPATH": args.baseline})] if args.baseline else []),
                ]:
                    calls = count_calls(
                        folder / f"calls-{key}", up_port, env, args.requests, args.concurrency
                    )
                    print(f"  {key:<10} {calls:7.1f} Python calls per request (cProfile)")
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
