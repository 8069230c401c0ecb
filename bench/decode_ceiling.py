"""The ceiling: how fast the shared libllama decodes with nothing around it, and each server's
share of that (issue 48).

Both servers run the same libllama, so neither can be faster than its decode: being 5% ahead of
llama-server is only possible if llama-server spends at least 5% of its wall time outside the
decode both share. This bench measures that ceiling with llama.cpp's own `llama-batched-bench`
(built beside the reference llama-server and linked to the same shared libraries) on the same
GGUF, threads, batch, context per sequence and KV layout `batching.py` gives both servers, and
runs `batching.py`'s tokens/s for both servers in the same run:

    python bench/decode_ceiling.py --llama-server PATH/build/bin/llama-server [--model demo gemma]

Per model, for c users (c sequences at once, at most `parallel`; a model with fewer sequences
than users serves them in waves):

- the prompt's length: what llama-server's usage counts for the bench's prompt;
- `llama-batched-bench -npp P -ntg 128 -npl 1,4,8`: random tokens, `llama_decode` alone, no
  sampling, no HTTP. `decode` = S_TG (c x 128 tokens over the 128 generation steps), the
  "end-to-end" ceiling = c x 128 tokens over the prompt's decode (all c prompts in one batch,
  as llama-server does) plus the 128 steps;
- each server's aggregate tokens/s at c users (`batching.aggregate`: completion tokens from
  the first request sent to the last delta) and its share of the end-to-end ceiling, and the
  one-stream decode rate (c = 1, first to last delta) as a share of S_TG at one sequence.

If llama-server runs at >= 1/1.05 = 95.2% of the ceiling, 1.05x llama-server is out of reach
with the same decode.

`--verify-cost`: the cost of a speculative verification step. In process, with the engine's
own `LlamaRuntime` (the wheel's libllama, the bench's context settings), the wall time of one
`llama_decode` of k rows of one sequence after the prompt, logits on every row (as a
verification needs), for k = 1, 2, 4, 8, 16, 32, relative to k = 1; the k values interleaved,
median of `--repeats`. Read with bench/README.md's speculative.py round eight.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from batching import MODEL, SHAPES, STORY, aggregate, gemma_gguf, llama_server_command, sluicegate_config
from local_engine import cpu_seconds, free_port, serving
from sluicegate.demo.model import make_demo_gguf

ROWS = (1, 2, 4, 8, 16, 32)


def prompt_tokens(url: str, real: bool) -> int:
    """The prompt tokens the server counts for `batching.aggregate`'s prompt."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"round 0 c1 request 0. {STORY}"}],
        "max_tokens": 1,
        **({"temperature": 0} if real else {}),
    }
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


def batched_bench(
    tool: Path, gguf: Path, args: argparse.Namespace, prompt: int, lanes: list[int]
) -> dict[int, dict[str, float]]:
    """`llama-batched-bench`'s rows by sequences: t_pp, t_tg, speed_tg (its JSON lines)."""
    command = [
        str(tool), "-m", str(gguf), "-c", str(args.context * max(lanes)), "--no-kv-unified",
        "-t", str(args.threads), "-tb", str(args.threads), "-b", str(args.batch), "-ub", str(args.batch),
        "--no-repack", "-npp", str(prompt), "-ntg", str(args.max_tokens),
        "-npl", ",".join(map(str, lanes)), "--output-format", "jsonl",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    rows = {}
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            row = json.loads(line)
            rows[int(row["pl"])] = row
    if done.returncode or set(rows) != set(lanes):
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return rows


def ceilings(
    rows: dict[int, dict[str, float]], users: int, parallel: int, tokens: int
) -> tuple[float, float]:
    """(decode tok/s, end-to-end tok/s) for `users` at once on `parallel` sequences."""
    lanes = min(users, parallel)
    row = rows[lanes]
    waves = math.ceil(users / parallel)
    return float(row["speed_tg"]), users * tokens / (waves * (float(row["t_pp"]) + float(row["t_tg"])))


def model_gguf(model: str, folder: Path) -> Path:
    if model == "gemma":
        return gemma_gguf()
    return make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)


def measure(args: argparse.Namespace, model: str, folder: Path) -> None:
    """Both servers' rounds and the tool's, alternating, then the shares."""
    real = model != "demo"
    shape = SHAPES[model]
    margs = argparse.Namespace(**vars(args))
    margs.parallel, margs.context = shape
    gguf = model_gguf(model, folder)
    config = folder / f"{model}.toml"
    config.write_text(sluicegate_config(gguf, margs.context, args.threads, args.batch, margs.parallel))
    ours_url, ref_url = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
    env.pop("SLUICEGATE_CONFIG", None)
    targets = {
        "sluicegate": ([sys.executable, "-m", "sluicegate", "serve", "--config", str(config), "--port", ours_url.rsplit(":", 1)[1]], ours_url, env),
        "llama-server": (llama_server_command(margs, gguf, ref_url, real), ref_url, {k: v for k, v in env.items() if k != "PYTHONPATH"}),
    }  # fmt: skip
    tool = Path(args.tools) / "llama-batched-bench"
    lanes = sorted({min(c, margs.parallel) for c in args.concurrency})
    served: dict[str, dict[str, list[float]]] = {name: {} for name in targets}
    tool_rows: list[dict[int, dict[str, float]]] = []
    pids: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for name, (command, url, target_env) in targets.items():
            pids[name] = stack.enter_context(
                serving(command, url, folder / f"{model}-{name}.log", target_env)
            )
            aggregate(url, 1, 8, "warm-up", real)
        prompt = prompt_tokens(ref_url, real)
        ours_prompt = prompt_tokens(ours_url, real)
        print(
            f"{model}: prompt {prompt} tokens (llama-server's count; Sluicegate's {ours_prompt})", flush=True
        )
        for round_ in range(args.rounds):
            # The servers idle (no CPU) while the tool runs, and the tool is gone while they serve.
            if args.cpu:
                rows = decode_cpu(gguf, margs, prompt, lanes)
            else:
                rows = batched_bench(tool, gguf, margs, prompt, lanes)
            tool_rows.append(rows)
            print(f"{model} round {round_} {'decode in process' if args.cpu else 'llama-batched-bench'}: " + ", ".join(
                f"{n} seq: decode {r['speed_tg']:.1f} tok/s, prompt {r['t_pp'] * 1000:.0f} ms" for n, r in rows.items()
            ), flush=True)  # fmt: skip
            for name, (_, url, _) in targets.items():
                for c in args.concurrency:
                    before = cpu_seconds(pids[name])
                    total, single, _, tokens = aggregate(
                        url, c, args.max_tokens, f"round {round_} c{c}", real
                    )
                    # CPU ms a token, of the whole process (HTTP, sampling, Python: all of it)
                    served[name].setdefault(f"c{c} cpu", []).append(
                        (cpu_seconds(pids[name]) - before) * 1000 / tokens
                    )
                    served[name].setdefault(f"c{c}", []).append(total)
                    served[name].setdefault(f"c{c} tokens", []).append(tokens)
                    if c == 1:
                        served[name].setdefault("one", []).append(single)
                    print(
                        f"{model} round {round_} {name:12} c={c}: {total:7.1f} tok/s ({tokens} tokens)",
                        flush=True,
                    )

    def tool_median(c: int, part: int) -> float:
        return statistics.median(
            ceilings(rows, c, margs.parallel, args.max_tokens)[part] for rows in tool_rows
        )

    print(
        f"\n{model}: {gguf.name}, threads {args.threads}, parallel {margs.parallel}, context {margs.context} "
        f"per sequence, batch {args.batch}, prompt {prompt} tokens, {args.max_tokens} tokens a user, "
        f"{args.rounds} rounds (medians)"
    )
    print(
        f"{'users':>5} {'decode':>8} {'end-to-end':>10} {'llama-server':>12} {'share':>6} {'Sluicegate':>10} {'share':>6} {'ratio':>6}"
    )
    for c in args.concurrency:
        decode, whole = tool_median(c, 0), tool_median(c, 1)
        ref = statistics.median(served["llama-server"][f"c{c}"])
        ours = statistics.median(served["sluicegate"][f"c{c}"])
        print(
            f"{c:5} {decode:8.1f} {whole:10.1f} {ref:12.1f} {ref / whole:6.1%} {ours:10.1f} {ours / whole:6.1%} {ours / ref:6.2f}"
        )
    if 1 in args.concurrency:
        decode = tool_median(1, 0)
        ref, ours = (statistics.median(served[name]["one"]) for name in ("llama-server", "sluicegate"))
        print(
            f"one stream (c = 1, first to last delta) against decode {decode:.1f}: llama-server {ref:.1f} ({ref / decode:.1%}), Sluicegate {ours:.1f} ({ours / decode:.1%})"
        )
    print("shares above 95.2% leave no room for 1.05x with the same decode")
    if args.cpu:  # one thread each: CPU time, which a loaded machine's waiting does not inflate
        print(
            f"{'users':>5} {'decode CPU ms/token':>20} {'llama-server':>12} {'share':>6} {'Sluicegate':>10} {'share':>6}"
        )
        for c in args.concurrency:
            ceiling = statistics.median(
                math.ceil(c / margs.parallel) * (rows[min(c, margs.parallel)]["cpu_pp"] + rows[min(c, margs.parallel)]["cpu_tg"])
                * 1000 / (c * args.max_tokens)
                for rows in tool_rows
            )  # fmt: skip
            ref = statistics.median(served["llama-server"][f"c{c} cpu"])
            ours = statistics.median(served["sluicegate"][f"c{c} cpu"])
            print(
                f"{c:5} {ceiling:20.2f} {ref:12.2f} {ceiling / ref:6.1%} {ours:10.2f} {ceiling / ours:6.1%}"
            )


def decode_cpu(
    gguf: Path, args: argparse.Namespace, prompt: int, lanes: list[int]
) -> dict[int, dict[str, float]]:
    """`batched_bench`'s rows, measured in process with the engine's `LlamaRuntime` (the same
    libllama) on one thread: for n sequences, n prompts of `prompt` random tokens in batches of
    `batch`, then `max_tokens` steps of n rows (logits on each). t_* are wall seconds, cpu_* the
    thread's CPU seconds (one thread computes in the calling thread)."""
    import llama_cpp

    from sluicegate.engines.llamacpp.runtime import LlamaRuntime

    runtime = LlamaRuntime(
        gguf, context_length=args.context, n_gpu_layers=0, threads=1, batch_size=args.batch,
        flash_attention=None, on_progress=lambda _: None, sequences=args.parallel,
    )  # fmt: skip
    batch = llama_cpp.llama_batch_init(args.batch, 0, 1)
    rows: dict[int, dict[str, float]] = {}
    try:
        ctx = runtime.context.ctx
        memory = llama_cpp.llama_get_memory(ctx)

        def decode(cells: list[tuple[int, int, int, bool]]) -> None:  # (token, position, sequence, logits)
            for at in range(0, len(cells), args.batch):
                part = cells[at : at + args.batch]
                batch.n_tokens = len(part)
                for i, (token, position, seq, logits) in enumerate(part):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
                    batch.seq_id[i][0], batch.logits[i] = seq, logits
                if llama_cpp.llama_decode(ctx, batch):
                    raise RuntimeError("llama_decode failed")

        vocab = runtime.n_vocab
        for n in lanes:
            llama_cpp.llama_memory_clear(memory, False)
            cells = [
                ((s * 977 + i * 7919 + 13) % vocab, i, s, i == prompt - 1)
                for s in range(n)
                for i in range(prompt)
            ]
            wall, cpu = time.perf_counter(), time.thread_time()
            decode(cells)
            pp = (time.perf_counter() - wall, time.thread_time() - cpu)
            wall, cpu = time.perf_counter(), time.thread_time()
            for step in range(args.max_tokens):
                decode([((s * 31 + step * 17) % vocab, prompt + step, s, True) for s in range(n)])
            tg = (time.perf_counter() - wall, time.thread_time() - cpu)
            rows[n] = {
                "t_pp": pp[0],
                "t_tg": tg[0],
                "cpu_pp": pp[1],
                "cpu_tg": tg[1],
                "speed_tg": n * args.max_tokens / tg[0],
            }
    finally:
        llama_cpp.llama_batch_free(batch)
        runtime.close()
    return rows


def verify_cost(args: argparse.Namespace, model: str, folder: Path) -> None:
    """One `llama_decode` of k rows of one sequence after the prompt, logits on every row."""
    if args.curve:  # a curve measured before: only its reading
        cost = dict(zip(ROWS, (float(x) for x in args.curve.split(",")), strict=True))
        read_curve(args, cost)
        return
    import llama_cpp

    from sluicegate.engines.llamacpp.runtime import LlamaRuntime

    parallel, context = SHAPES[model]
    gguf = model_gguf(model, folder)
    runtime = LlamaRuntime(
        gguf, context_length=context, n_gpu_layers=0, threads=args.threads, batch_size=args.batch,
        flash_attention=None, on_progress=lambda _: None, sequences=parallel,
    )  # fmt: skip
    try:
        ctx, batch = runtime.context.ctx, runtime.batch
        memory = llama_cpp.llama_get_memory(ctx)
        depth = args.depth
        tokens = [(i * 7919 + 13) % runtime.n_vocab for i in range(depth + max(ROWS))]
        for at in range(0, depth, args.batch):  # the prompt, a batch at a time
            batch.set_batch(tokens[at : min(at + args.batch, depth)], at, logits_all=False)
            if llama_cpp.llama_decode(ctx, batch.batch):
                raise RuntimeError("the prompt's decode failed")
        times: dict[tuple[int, bool], list[float]] = {}
        # One thread computes in the calling thread (no OpenMP team): its CPU time is the
        # decode's, which a loaded machine's waiting does not inflate. Two threads: wall time.
        clock = time.thread_time if args.threads == 1 else time.perf_counter
        for _ in range(args.repeats):
            for k in ROWS:
                for every in (True, False):
                    batch.set_batch(tokens[depth : depth + k], depth, logits_all=every)
                    start = clock()
                    if llama_cpp.llama_decode(ctx, batch.batch):
                        raise RuntimeError(f"a decode of {k} rows failed")
                    times.setdefault((k, every), []).append(clock() - start)
                    llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)
    finally:
        runtime.close()
    # The minimum is the load-robust figure on a shared machine (a decode that ran unpreempted).
    pick = statistics.median if args.median else min
    one = pick(times[(1, True)])
    cost = {k: pick(times[(k, True)]) / one for k in ROWS}
    print(
        f"\n{model}: {gguf.name}, one `llama_decode` of k rows at depth {depth}, threads {args.threads}, {pick.__name__} of {args.repeats}, {'thread CPU' if args.threads == 1 else 'wall'} time"
    )
    print(f"{'k':>3} {'all rows ms':>11} {'cost':>6} {'median ms':>9} {'last row only ms':>16} {'cost':>6}")
    for k in ROWS:
        every, last = pick(times[(k, True)]), pick(times[(k, False)])
        print(
            f"{k:3} {every * 1000:11.2f} {cost[k]:6.2f} {statistics.median(times[(k, True)]) * 1000:9.2f} {last * 1000:16.2f} {last / one:6.2f}"
        )
    read_curve(args, cost)


def read_curve(args: argparse.Namespace, cost: dict[int, float]) -> None:
    for spec in args.workload:
        speed_ups(spec, cost)
    if args.replies:
        replay_lengths(Path(args.replies), cost)


def replay_lengths(folder: Path, cost: dict[int, float]) -> None:
    """The kept replies of `speculative.py --keep-replies` (token ids) replayed with their
    prediction at each longest draft, each step weighed by the cost curve: the speed-up over
    one token a step (the decode alone, no host side), and where the longest draft is best."""
    import speculation_replay

    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        output = record["output"]
        plain = (len(output) - 1) * cost[1]
        print(f"{path.parent.name}/{path.name}: {len(output)} tokens, prediction replayed by longest draft")
        for most in (1, 2, 3, 4, 6, 8, 12, 16, 24, 31):
            rows: list[int] = []
            drafted, taken, steps = speculation_replay.predicted(
                record["prompt"], output, record["prediction"], most, rows=rows
            )
            spent = sum(step_cost(cost, r) for r in rows)
            print(
                f"  draft_max {most:2}: {steps} steps, {drafted} drafted, {taken} taken, "
                f"{len(output) / (steps + 1):.2f} tokens a step, {plain / spent:.2f}x at the curve"
            )


def step_cost(cost: dict[int, float], rows: float) -> float:
    """The cost of a step of `rows` rows (k = 1 is 1), interpolated between the k measured."""
    below = max(k for k in cost if k <= rows)
    above = min((k for k in cost if k >= rows), default=below)
    if above == below:
        return cost[below] * rows / below
    return cost[below] + (cost[above] - cost[below]) * (rows - below) / (above - below)


def speed_ups(spec: str, cost: dict[int, float]) -> None:
    """NAME:TOKENS:STEPS:DRAFTED (a run's counts, bench/speculative.py): its tokens a step at
    its rows a step, the speed-up the cost curve allows it, and what the best fixed draft
    length would give at its acceptance if every drafted token were taken with the same
    chance (the tokens a step of a draft of d: 1 + a + ... + a^d)."""
    name, tokens, steps, drafted = spec.split(":")
    per_step, rows = int(tokens) / int(steps), 1 + int(drafted) / int(steps)
    taken = int(tokens) - int(steps)
    rate = taken / int(drafted) if int(drafted) else 0.0
    print(
        f"{name}: {per_step:.2f} tokens a step at {rows:.2f} rows a step (the curve read at the mean): at most "
        f"{per_step / step_cost(cost, rows):.2f}x; 2x needs {2 * step_cost(cost, rows):.2f} tokens a step "
        f"at these rows; acceptance {rate:.0%}"
    )
    best = max(
        range(0, max(cost)),
        key=lambda d: sum(rate**i for i in range(d + 1)) / step_cost(cost, 1 + d),
    )
    for d in sorted({1, 2, 4, 8, 15, best}):
        gain = sum(rate**i for i in range(d + 1)) / step_cost(cost, 1 + d)
        print(f"  draft of {d:2} at {rate:.0%} a token: {gain:.2f}x{'  (the best)' if d == best else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", help="the reference llama-server (its directory holds the tools)")
    parser.add_argument("--tools", help="where llama-batched-bench is (default: beside --llama-server)")
    parser.add_argument("--model", nargs="+", choices=sorted(SHAPES), default=["demo", "gemma"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="one thread each, and CPU time: the decode in process (not the tool) against each server's CPU a token",
    )
    parser.add_argument("--verify-cost", action="store_true", help="the verification step's cost instead")
    parser.add_argument("--depth", type=int, default=512, help="--verify-cost: the prompt before the rows")
    parser.add_argument("--repeats", type=int, default=20, help="--verify-cost: decodes a k")
    parser.add_argument(
        "--replies", help="--verify-cost: speculative.py --keep-replies DIR, replayed by draft length"
    )
    parser.add_argument("--curve", help="--verify-cost: the costs of k = 1, 2, 4, 8, 16, 32 (not measured)")
    parser.add_argument("--median", action="store_true", help="--verify-cost: medians (default: minima)")
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="NAME:TOKENS:STEPS:DRAFTED",
        help="--verify-cost: a speculative run's counts, read against the cost curve (repeatable)",
    )
    args = parser.parse_args()
    # batching.llama_server_command's settings that this bench keeps at batching.py's defaults.
    args.prompt_cache, args.llama_server_arg = False, []
    if args.cpu:
        args.threads = 1
    if not args.verify_cost:
        if not args.llama_server:
            parser.error("--llama-server is needed (or --verify-cost)")
        args.tools = args.tools or str(Path(args.llama_server).parent)
    with tempfile.TemporaryDirectory(prefix="sluicegate-ceiling-") as tmp:
        for model in args.model:
            (verify_cost if args.verify_cost else measure)(args, model, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
