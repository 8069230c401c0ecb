"""Benchmark: what each server does per token at c users, in counts (not times).

Run from the repository root (venv active), with the `llama-server` of bench/batching.py:

    python bench/batch_counts.py --llama-server PATH --model demo --concurrency 4 8 --rounds 3

The servers and config of `bench/batching.py` (same GGUF, threads, batch, sequences, context;
llama-server with `--metrics`); the rounds alternate between them. Per run of c streaming
requests at once, from both servers' llama-server metrics (`llamacpp:*` on /metrics, which
Sluicegate exposes under the same names) read before and after: `llama_decode` calls per
generated token, sequences per decode (`busy slots`), and from /proc the CPU time per generated
token of the whole process, of its busiest thread (a decode thread) and of the rest (Sluicegate:
the event loop and the rest; llama-server: its HTTP threads and the rest), and the process's
threads. Sluicegate's main thread is its event loop (its voluntary context switches: about one per
wake-up); llama-server's main thread runs `llama_decode`. The prompts are the same for every
server in a round (Gemma at temperature 0 then writes the same replies on both). Counts do not
depend on the machine's load; the CPU times less than wall times do.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from batching import MODEL, SHAPES, STORY, gemma_gguf, sluicegate_config, stream
from batching_cpu import thread_seconds
from local_engine import free_port, serving
from sluicegate.demo.model import make_demo_gguf


def metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.partition(" ")
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


def wakeups(pid: int) -> int:
    """The main thread's voluntary context switches: Sluicegate's event loop sleeps in epoll
    between wake-ups, so one per wake-up (and per other wait)."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def idle_waits(pid: int, seconds: float = 3.0) -> float:
    """The main thread's waits per second while nothing is served (its timers)."""
    first = wakeups(pid)
    time.sleep(seconds)
    return (wakeups(pid) - first) / seconds


def run(
    url: str, pid: int, concurrency: int, max_tokens: int, tag: str, real: bool, idle: float
) -> dict[str, float]:
    extra = {"temperature": 0} if real else None
    before, cpu_before, woken = metrics(url), thread_seconds(pid), wakeups(pid)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        replies = list(
            pool.map(
                lambda i: stream(url, f"{tag} request {i}. {STORY}", max_tokens, extra=extra),
                range(concurrency),
            )
        )
    wall = time.perf_counter() - started
    after, cpu_after, woken = metrics(url), thread_seconds(pid), wakeups(pid) - woken
    tokens = sum(reply.tokens for reply in replies)
    spent = sorted((cpu_after[t] - cpu_before.get(t, 0.0) for t in cpu_after), reverse=True)
    decodes = after["n_decode_total"] - before["n_decode_total"]
    prompt = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    return {
        "tokens": float(tokens),
        "tokens/s": tokens / wall,
        "decodes per token": decodes / tokens,
        "prompt tokens per decode": prompt / decodes if decodes else 0.0,
        "process CPU µs/token": sum(spent) / tokens * 1e6,
        "busiest thread µs/token": spent[0] / tokens * 1e6,
        "others but 2 µs/token": sum(spent[2:]) / tokens * 1e6,
        "main thread µs/token": (cpu_after[pid] - cpu_before.get(pid, 0.0)) / tokens * 1e6,
        # less what its timers would have woken it anyway
        "main thread waits/token": max(woken - idle * wall, 0.0) / tokens,
        "threads": float(len(cpu_after)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--model", choices=sorted(SHAPES), default="demo")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--before", help="a checkout whose src/ also serves the same config, as 'before'")
    parser.add_argument("--extra", default="", help="more [[models]] lines for Sluicegate (';' separates)")
    args = parser.parse_args()
    parallel, context = SHAPES[args.model]
    real = args.model != "demo"
    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = (
            gemma_gguf() if real else make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)
        )
        config = folder / "sluicegate.toml"
        text = sluicegate_config(gguf, context, args.threads, args.batch, parallel)
        config.write_text(text + args.extra.replace(";", "\n") + "\n")
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        ours, ref = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        serve = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        targets = {
            "sluicegate": ([*serve, "--port", ours.rsplit(":", 1)[1]], ours, env),
            "llama-server": (
                [
                    args.llama_server, "-m", str(gguf), "--alias", MODEL, "--host", "127.0.0.1",
                    "--port", ref.rsplit(":", 1)[1], "-c", str(context * parallel), "-np", str(parallel),
                    "--no-kv-unified", "-t", str(args.threads), "-tb", str(args.threads),
                    "-b", str(args.batch), "-ub", str(args.batch), "--cache-ram", "0", "--no-repack",
                    "--metrics",
                    *(["--no-jinja", "--chat-template", "gemma"] if real else ["--jinja"]),
                ],
                ref,
                {k: v for k, v in env.items() if k != "PYTHONPATH"},
            ),
        }  # fmt: skip
        if args.before:
            url = f"http://127.0.0.1:{free_port()}"
            before_env = {**env, "PYTHONPATH": str(Path(args.before).resolve() / "src")}
            targets["before"] = ([*serve, "--port", url.rsplit(":", 1)[1]], url, before_env)
        results: dict[str, dict[int, dict[str, list[float]]]] = {name: {} for name in targets}
        with contextlib.ExitStack() as stack:
            pids, idle = {}, {}
            for name, (command, url, target_env) in targets.items():
                pids[name] = stack.enter_context(serving(command, url, folder / f"{name}.log", target_env))
                stream(url, "warm-up", 8)
                idle[name] = idle_waits(pids[name])
            for round_ in range(args.rounds):
                for name, (_, url, _) in targets.items():
                    for c in args.concurrency:
                        row = run(
                            url, pids[name], c, args.max_tokens, f"round {round_} c{c}", real, idle[name]
                        )
                        for key, value in row.items():
                            results[name].setdefault(c, {}).setdefault(key, []).append(value)
                        print(
                            f"{name:12} round {round_} c={c}: "
                            + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                            flush=True,
                        )
    print(f"\n{gguf.name}, {args.rounds} rounds, max_tokens {args.max_tokens} (medians)")
    for c in args.concurrency:
        keys = list(results["sluicegate"][c])
        print(f"c = {c}" + "".join(f"{key:>26}" for key in keys))
        for name in targets:
            print(f"{name:12}" + "".join(f"{statistics.median(results[name][c][k]):26.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
