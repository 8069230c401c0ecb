"""Python function calls per request start and per paced token, counted by cProfile in a
running Sluicegate: a count that the machine's load does not move (unlike CPU seconds).

    python bench/call_counts.py [--baseline /path/to/other/src] [--requests 400] [--tokens 64]

The fake upstream (`bench/fast_upstream.py`) and `sluicegate serve` under a cProfile switch
(`request_start.py --serve-counted`), optionally a second Sluicegate with `--baseline`'s code.
Each server gets two loads, each profiled alone: `--requests` one-token requests (the request
start: with one token the whole request is its start) and `--requests` requests of `--tokens`
tokens paced 5 ms apart by the upstream (`fake-d5`: one token per upstream read, the paced
case of `gateway.py`). Per paced token = (calls of the long load - calls of the short one) ÷
(`--tokens` - 1) ÷ requests. Printed: calls per request start and per paced token, the fast
lane's share of reads (its counter from /metrics), and the functions that run most per paced
token and per request (cProfile's own names; compiled functions called from Python show as
builtins, calls between compiled functions are not seen).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from gateway_targets import Proc, fast_upstream, start_sluicegate

HERE = Path(__file__).resolve().parent

Counts = dict[tuple[str, int, str], int]


def body(tokens: int, model: str) -> str:
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": tokens,
        }
    )


def load(port: int, body_json: str, requests: int, concurrency: int, tokens: int) -> int:
    cmd = [sys.executable, str(HERE / "load_client.py"), "run", "--port", str(port), "--body", body_json]
    cmd += ["--concurrency", str(concurrency), "--requests", str(requests)]
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        client = subprocess.Popen(
            [*cmd, "--out", result.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert client.stdin is not None and client.stdout is not None
        client.stdout.readline()
        client.stdin.write(b"go\n")
        client.stdin.flush()
        _, err = client.communicate(timeout=600)
        if client.returncode != 0:
            raise RuntimeError(err.decode()[-3000:])
        streams = json.loads(Path(result.name).read_bytes())["streams"]
    bad = [s for s in streams if s["error"] or s["tokens"] != tokens]
    if bad:
        raise RuntimeError(f"{len(bad)} bad streams, e.g. {bad[0]}")
    return len(streams)


def lane_reads(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("sluicegate_fast_lane_reads_total"):
                return float(line.split()[-1])
    return 0.0


def profiled(proc: Proc, out: Path, run: object) -> Counts:
    """cProfile's call count per function over `run()`."""
    if out.exists():
        out.unlink()
    os.kill(proc.popen.pid, signal.SIGUSR1)
    time.sleep(0.5)
    run()  # type: ignore[operator]
    os.kill(proc.popen.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 60
    while not out.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("no profile written")
        time.sleep(0.1)
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    return {k: v[1] for k, v in stats.items()}


def name(key: tuple[str, int, str]) -> str:
    path, line, function = key
    if path == "~":
        return function
    short = path.split("/sluicegate/", 1)[-1] if "/sluicegate/" in path else Path(path).name
    return f"{short}:{line} {function}"


def measure(
    folder: Path, upstream: int, env: dict[str, str] | None, args: argparse.Namespace
) -> dict[str, object]:
    folder.mkdir()
    out = folder / "calls.prof"
    launcher = [sys.executable, str(HERE / "request_start.py"), "--serve-counted", str(out), "--"]
    proc, port = start_sluicegate(folder, upstream, ["fake-d0", "fake-d5"], env=env, launcher=launcher)
    try:
        short, long = body(1, "fake-d0"), body(args.tokens, "fake-d5")
        load(port, short, 100, args.concurrency, 1)  # warm up
        load(port, long, 20, args.concurrency, args.tokens)
        n = args.requests
        start_counts = profiled(proc, out, lambda: load(port, short, n, args.concurrency, 1))
        lane_before = lane_reads(port)
        long_counts = profiled(proc, out, lambda: load(port, long, n, args.concurrency, args.tokens))
        lane = lane_reads(port) - lane_before
    finally:
        proc.stop()
    per_request = {k: v / n for k, v in start_counts.items()}
    per_token = {
        k: (long_counts.get(k, 0) - start_counts.get(k, 0)) / n / (args.tokens - 1)
        for k in set(long_counts) | set(start_counts)
    }
    return {
        "per_request": per_request,
        "per_token": per_token,
        "lane_share": lane / (n * (args.tokens + 3)),  # role, tokens, finish, usage: reads per stream
    }


def show(label: str, result: dict[str, object], top: int) -> None:
    per_request: dict[tuple[str, int, str], float] = result["per_request"]  # type: ignore[assignment]
    per_token: dict[tuple[str, int, str], float] = result["per_token"]  # type: ignore[assignment]
    print(f"\n== {label}")
    print(f"  calls per request start (one-token request): {sum(per_request.values()):8.1f}")
    print(f"  calls per paced token:                        {sum(per_token.values()):8.1f}")
    print(f"  fast-lane reads per upstream read (approx.):  {result['lane_share']:8.2f}")  # type: ignore[str-format]
    print(f"\n  per paced token, top {top}:")
    for key, calls in sorted(per_token.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {calls:6.2f}  {name(key)}")
    print(f"\n  per request start, top {top}:")
    for key, calls in sorted(per_request.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {calls:6.2f}  {name(key)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="a second Sluicegate with PYTHONPATH=<this>")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", help="write the counts here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fast_upstream(folder) as up_port:
            results = {"this": measure(folder / "this", up_port, None, args)}
            if args.baseline:
                env = {"PYTHONPATH": args.baseline}
                results["baseline"] = measure(folder / "baseline", up_port, env, args)
    for label, result in results.items():
        show(label, result, args.top)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    label: {
                        part: {name(k): v for k, v in r[part].items() if v}  # type: ignore[attr-defined]
                        for part in ("per_request", "per_token")
                    }
                    for label, r in results.items()
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
