"""Benchmark: where the llamacpp engine's CPU goes per token, thread by thread, at c = 1.

Run from the repository root (venv active):

    python bench/batching_cpu.py --rounds 8 --variant "30 ms=stream_interval_ms = 30" \
        --variant "every token=stream_interval_ms = 0"

Each variant is one Sluicegate server with the config of `bench/batching.py` (the ~70 MB
random-weight demo GGUF, 2 threads, 8 sequences of 2,560 tokens) plus the variant's extra
`[[models]]` lines (`;` separates lines; `--before CHECKOUT` also serves the plain config from
another checkout's src/). All servers are up at once and the rounds alternate between them. A
round sends three streaming requests one after another (128 tokens each) and reads each thread's
user + system time from /proc before and after: the event loop (the main thread), the engine's
worker thread (the busiest other thread: it runs `llama_decode` and the Python between decodes)
and the process as a whole, per completion token. /proc counts in clock ticks (10 ms), so a
round's figure is coarse; the medians over rounds are what to read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from batching import STORY, sluicegate_config, stream
from local_engine import free_port, serving
from sluicegate.demo.model import make_demo_gguf

TICK = os.sysconf("SC_CLK_TCK")


def thread_seconds(pid: int) -> dict[int, float]:
    """User + system seconds of each thread of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME=LINES", help="a server (repeatable)"
    )
    parser.add_argument("--before", help="a checkout whose src/ also serves the plain config")
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant)
    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        base = sluicegate_config(gguf, context=2560, threads=2, batch=512, parallel=8)
        servers: dict[str, tuple[str, dict[str, str]]] = {
            name: (base + lines.replace(";", "\n") + "\n", env) for name, lines in variants.items()
        }
        if args.before:
            servers["before"] = (base, {**env, "PYTHONPATH": str(Path(args.before).resolve() / "src")})
        results: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        with contextlib.ExitStack() as stack:
            targets = {}
            for n, (name, (text, target_env)) in enumerate(servers.items()):
                config = folder / f"{n}.toml"
                config.write_text(text)
                url = f"http://127.0.0.1:{free_port()}"
                command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
                command += ["--port", url.rsplit(":", 1)[1]]
                targets[name] = (
                    url,
                    stack.enter_context(serving(command, url, folder / f"{n}.log", target_env)),
                )
                stream(url, "warm-up", 8)
            for round_ in range(args.rounds):
                for name, (url, pid) in targets.items():
                    before, started = thread_seconds(pid), time.perf_counter()
                    tokens = sum(
                        stream(url, f"{name} {round_} {i}. {STORY}", args.max_tokens).tokens for i in range(3)
                    )
                    wall, after = time.perf_counter() - started, thread_seconds(pid)
                    spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
                    worker = max((s for tid, s in spent.items() if tid != pid), default=0.0)
                    out = results[name]
                    for key, value in (
                        ("event loop µs/token", spent.get(pid, 0.0) / tokens * 1e6),
                        ("worker µs/token", worker / tokens * 1e6),
                        ("process µs/token", sum(spent.values()) / tokens * 1e6),
                        ("tokens/s", tokens / wall),
                    ):
                        out.setdefault(key, []).append(value)
                    print(
                        f"{name:14} round {round_}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in out.items()),
                        flush=True,
                    )
    print(f"\n{args.rounds} rounds of 3 x {args.max_tokens} tokens at c = 1 (medians)")
    keys = list(next(iter(results.values())))
    print(f"{'':16}" + "".join(f"{key:>22}" for key in keys))
    for name, out in results.items():
        print(f"{name:16}" + "".join(f"{statistics.median(out[key]):22.1f}" for key in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
