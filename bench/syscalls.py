"""Syscalls and kernel CPU per paced token: Sluicegate against nginx, in front of the same fake
upstream. What callgrind (`bench/instructions.py`) does not count: the kernel's share.

    python bench/syscalls.py [--baseline /path/to/other/src] [--requests 256] [--tokens 64]
                             [--concurrency 64] [--no-nginx]

Each server gets, after a warm-up, two loads with `strace -c -f` attached to its processes
(counts only: strace slows the server, so its times are not read): `--requests` one-token
requests, then `--requests` requests of `--tokens` tokens paced 5 ms apart by the upstream
(`fake-d5`, one token per upstream read). Per paced token = (the long load's calls - the short
one's) / (`--tokens` - 1) / requests, per syscall. Then the same two loads without strace, with
the server's user and system CPU from /proc (clock ticks: coarse, and the machine's load moves
them; counts are what this bench is for).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from call_counts import body, load
from gateway_targets import Proc, fast_upstream, find_nginx, start_nginx, start_sluicegate


def _ticks(pids: list[int]) -> tuple[int, int]:
    user = system = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])
    return user, system


def traced(pids: list[int], out: Path, run: object) -> dict[str, tuple[int, int]]:
    """{syscall: (calls, errors)} the processes made during `run()` (strace -c, attached)."""
    cmd = ["strace", "-c", "-f", "-q", "-o", str(out)]
    for pid in pids:
        cmd += ["-p", str(pid)]
    tracer = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached (strace has no ready signal)
    try:
        run()  # type: ignore[operator]
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(60)
    found: dict[str, tuple[int, int]] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[0].replace(".", "").isdigit():
            continue
        name = parts[-1]
        if name == "total":
            continue
        calls = int(parts[3])
        errors = int(parts[4]) if len(parts) == 6 else 0
        found[name] = (calls, errors)
    return found


def measure(proc: Proc, port: int, folder: Path, args: argparse.Namespace) -> dict[str, object]:
    short, long = body(1, "fake-d0"), body(args.tokens, "fake-d5")
    c, n, tokens = args.concurrency, args.requests, args.tokens
    load(port, short, 64, c, 1)
    load(port, long, 64, c, tokens)
    pids = proc.pids()
    a = traced(pids, folder / f"{proc.name}-short.strace", lambda: load(port, short, n, c, 1))
    b = traced(pids, folder / f"{proc.name}-long.strace", lambda: load(port, long, n, c, tokens))
    per_token: dict[str, tuple[float, float]] = {}
    for name in sorted(set(a) | set(b)):
        calls = (b.get(name, (0, 0))[0] - a.get(name, (0, 0))[0]) / n / (tokens - 1)
        errors = (b.get(name, (0, 0))[1] - a.get(name, (0, 0))[1]) / n / (tokens - 1)
        if abs(calls) >= 0.005:
            per_token[name] = (round(calls, 3), round(errors, 3))
    cpu: list[tuple[int, int]] = []
    for text, toks in ((short, 1), (long, tokens)):
        before = _ticks(pids)
        load(port, text, n * 2, c, toks)
        after = _ticks(pids)
        cpu.append((after[0] - before[0], after[1] - before[1]))
    hz = os.sysconf("SC_CLK_TCK")
    paced = 2 * n * (tokens - 1)
    return {
        "syscalls_per_token": per_token,
        "total_per_token": round(sum(v[0] for v in per_token.values()), 3),
        "user_us_per_token": round((cpu[1][0] - cpu[0][0]) / hz / paced * 1e6, 2),
        "system_us_per_token": round((cpu[1][1] - cpu[0][1]) / hz / paced * 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="also a Sluicegate with PYTHONPATH=<this>")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-nginx", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fast_upstream(folder) as up:
            servers: list[tuple[str, object]] = [
                ("this", lambda: start_sluicegate(folder, up, ["fake-d0", "fake-d5"])),
            ]
            if args.baseline:
                servers.append(
                    (
                        "baseline",
                        lambda: start_sluicegate(
                            folder, up, ["fake-d0", "fake-d5"], variant="baseline",
                            env={"PYTHONPATH": args.baseline},
                        ),
                    )
                )  # fmt: skip
            nginx = None if args.no_nginx else find_nginx(None)
            if nginx is not None:
                servers.append(("nginx", lambda: start_nginx(nginx, folder, up, 1)))
            for label, starter in servers:
                proc, port = starter()  # type: ignore[operator]
                try:
                    results[label] = measure(proc, port, folder, args)
                finally:
                    proc.stop()
    for label, r in results.items():
        print(
            f"{label:9} {r['total_per_token']:6.2f} syscalls per paced token; CPU per paced token "
            f"{r['user_us_per_token']} us user, {r['system_us_per_token']} us system"
        )
        for name, (calls, errors) in r["syscalls_per_token"].items():  # type: ignore[attr-defined]
            print(f"    {name:18} {calls:7.3f}" + (f"  ({errors:.3f} failed)" if errors else ""))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
