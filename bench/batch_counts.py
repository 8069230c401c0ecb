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

`--sched` (needs `perf` and its sched tracepoints): the scheduler's view of each run, per role of
the server's threads (`scheduling`): how often the two decode threads were taken off their CPU
while runnable by the server's own threads or by other processes, how often they slept, and
the event loop's run time, per generated token. (Instructions per token cannot be counted on
a machine without hardware counters, and valgrind cannot run an AVX-512 llama.cpp build.)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def scheduling(pid: int, into: dict[str, float], folder: Path) -> Any:
    """`perf sched record` (every CPU) while the block runs, then per role of the process's
    threads: "decode" (the two busiest: the thread that calls `llama_decode` and its OpenMP
    partner), "loop" (Sluicegate's main thread, its event loop; none in llama-server, whose main
    thread decodes) and "rest". From `perf sched timehist`: run time, time asleep before each
    run (wait) and runnable but not running (delay); from the switches: how often a decode
    thread was taken off its CPU while runnable (preempted), by whom (the other decode
    thread, the loop, the rest of this process's threads, or another process), and how often it went to sleep (a futex: the GIL, a barrier
    past its spin, a condition)."""
    data = folder / f"sched-{pid}.data"
    perf = subprocess.Popen(
        ["perf", "sched", "record", "-a", "-o", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # recording before the requests start
    try:
        yield
    finally:
        tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
    run_ms: collections.Counter[int] = collections.Counter()
    rows: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    timehist = ["perf", "sched", "timehist", "-i", str(data), "-p", str(pid)]
    for line in subprocess.run(timehist, capture_output=True, text=True, check=False).stdout.splitlines():
        fields = line.split()
        if len(fields) < 6 or not fields[0][:1].isdigit() or "[" not in fields[2]:
            continue
        tid = int(fields[2].rsplit("[", 1)[1].rstrip("]").split("/")[0])
        if tid in tids:
            rows[tid]["wait ms"] += float(fields[3])
            rows[tid]["delay ms"] += float(fields[4])
            rows[tid]["run ms"] += float(fields[5])
            run_ms[tid] += float(fields[5])
    preempted: collections.Counter[tuple[int, int]] = (
        collections.Counter()
    )  # (thread, by whom; -1: another process)
    script = ["perf", "script", "-i", str(data)]
    for line in subprocess.run(script, capture_output=True, text=True, check=False).stdout.splitlines():
        if "sched:sched_switch:" not in line:
            continue
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        with contextlib.suppress(KeyError, ValueError):
            prev, state, after = int(fields["prev_pid"]), fields["prev_state"], int(fields["next_pid"])
            if prev not in tids:
                continue
            if state.startswith("R"):
                preempted[prev, after if after in tids else -1] += 1
            else:
                rows[prev]["slept"] += 1
    busiest = [tid for tid, _ in run_ms.most_common(2)]

    def role(tid: int) -> str:
        return "decode" if tid in busiest else "loop" if tid == pid else "rest" if tid > 0 else "others"

    for (tid, by), count in preempted.items():
        rows[tid][f"preempted by {role(by)}"] += count
    for tid, row in rows.items():
        for key, value in row.items():
            into[f"{role(tid)} {key}"] = into.get(f"{role(tid)} {key}", 0.0) + value


def run(
    url: str,
    pid: int,
    concurrency: int,
    max_tokens: int,
    tag: str,
    real: bool,
    idle: float,
    sched: Path | None = None,
) -> dict[str, float]:
    extra = {"temperature": 0} if real else None
    counted: dict[str, float] = {}
    counting = scheduling(pid, counted, sched) if sched else contextlib.nullcontext()
    counting.__enter__()
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
    counting.__exit__(None, None, None)
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
        # the scheduler's view per generated token, by thread role (--sched)
        **{f"{key}/token": value / tokens for key, value in counted.items()},
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
    parser.add_argument("--sched", action="store_true", help="also perf sched's view per token, by thread")
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
                            url,
                            pids[name],
                            c,
                            args.max_tokens,
                            f"round {round_} c{c}",
                            real,
                            idle[name],
                            folder if args.sched else None,
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
        keys = sorted({key for name in targets for key in results[name][c]})
        print(f"c = {c}: " + "  ".join(f"{name:>14}" for name in targets))
        for key in keys:
            print(
                f"{key:44}"
                + "".join(f"{statistics.median(results[name][c].get(key, [0.0])):16.2f}" for name in targets)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
