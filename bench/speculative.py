"""Benchmark: speculative decoding (n-gram drafts) in Sluicegate and in llama-server.

Run from the repository root (venv active), without nice, with the `llama-server` built from
the llama.cpp the installed llama-cpp-python vendors (see bench/README.md):

    python bench/speculative.py --llama-server /path/to/llama-server [--rounds 3]

Gemma 3 270M (Q4_K_M, a base model; the GGUF the tests assemble into ~/.cache/sluicegate-tests),
one sequence of 4,096 tokens, the same threads and batch size everywhere. Four servers run at
once (an idle one costs nothing) and every round visits each in turn, so a shared machine's
drifting load spreads over all of them:

- Sluicegate without speculation, and with `speculative = "ngram"`;
- llama-server without, and with `--spec-type ngram-simple` (its n-gram lookup, the same
  n-gram size and draft length).

Two workloads, temperature 0, one user:

- edit: `/v1/completions` continuing a source file that the prompt shows first (a file of this
  repository, then the marker of a second copy and its first lines): the model writes the file
  out again, which is what an agent rewriting a file it was shown does;
- chat: `/v1/chat/completions` with a question no part of the prompt answers.

Each request is sent first with max_tokens 1, then timed: its prompt is then in the slot's KV
cache on every server (all but the last token), so the time is the decode's.
Tokens/s = the server's completion tokens / the request's wall time; the median over rounds.
Also the server process's CPU time (user + system, all threads) per completion token, which a
busy machine's waiting does not inflate (llama.cpp's spinning threads do, alike on both).
The servers' acceptance (drafted and taken tokens) is read from llama-server's `timings` and
Sluicegate's `/metrics`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from batching import gemma_gguf
from local_engine import cpu_seconds, free_port, serving

MODEL = "bench"
ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Explain how the tides work, and why there are two high tides a day."


def edit_prompt(lines: int) -> str:
    """A source file shown twice, then the start of its third copy: a repetitive source file
    for a base model to continue (it then copies; shown once, Gemma 3 270M writes a file of
    its own after a few lines)."""
    source = "\n".join((ROOT / "src/sluicegate/engines/llamacpp/stops.py").read_text().splitlines()[:lines])
    head = "\n".join(source.splitlines()[:3])
    return f"# stops.py\n{source}\n\n# stops.py (copy 2)\n{source}\n\n# stops.py (copy 3)\n{head}\n"


def request(url: str, workload: str, max_tokens: int, prompt: str) -> tuple[int, float, dict[str, int]]:
    """(completion tokens, wall seconds, llama-server's draft counts)."""
    if workload == "edit":
        path, body = "/v1/completions", {"prompt": prompt}
    else:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}
    body |= {"model": MODEL, "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    reply = httpx.post(url + path, json=body, timeout=600)
    wall = time.perf_counter() - start
    reply.raise_for_status()
    data = reply.json()
    timings = data.get("timings") or {}
    drafts = {k: int(timings[k]) for k in ("draft_n", "draft_n_accepted") if k in timings}
    return int(data["usage"]["completion_tokens"]), wall, drafts


def sluicegate_drafts(url: str) -> dict[str, int]:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = {}
    for name, key in (("draft_tokens_total", "draft_n"), ("draft_tokens_accepted_total", "draft_n_accepted")):
        match = re.search(rf"^sluicegate_llamacpp_{name}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        found[key] = int(float(match[1])) if match else 0
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--ngram", type=int, default=12, help="n-gram size (llama-server's default)")
    parser.add_argument("--draft-max", type=int, default=16)
    parser.add_argument("--edit-tokens", type=int, default=256)
    parser.add_argument("--chat-tokens", type=int, default=128)
    parser.add_argument("--lines", type=int, default=32, help="lines of the source file in the prompt")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the servers
    gguf = gemma_gguf()
    prompt = edit_prompt(args.lines)

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        base = (
            f'[server]\nlog_level = "warning"\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
            f'path = "{gguf}"\ncontext_length = {args.context}\nthreads = {args.threads}\n'
            f"batch_size = {args.batch}\nparallel = 1\n"
        )
        spec = f'speculative = "ngram"\nngram_size = {args.ngram}\ndraft_max = {args.draft_max}\n'
        targets: dict[str, tuple[list[str], str, dict[str, str]]] = {}
        for name, extra in (("sluicegate", ""), ("sluicegate ngram", spec)):
            config = folder / f"{name.replace(' ', '-')}.toml"
            config.write_text(base + extra)
            url = f"http://127.0.0.1:{free_port()}"
            command = [
                sys.executable,
                "-m",
                "sluicegate",
                "serve",
                "--config",
                str(config),
                "--port",
                url.rsplit(":", 1)[1],
            ]
            targets[name] = (command, url, env)
        ref_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        for name, extra_args in (
            ("llama-server", []),
            (
                "llama-server ngram",
                [
                    "--spec-type",
                    "ngram-simple",
                    "--spec-ngram-simple-size-n",
                    str(args.ngram),
                    "--spec-ngram-simple-size-m",
                    str(args.draft_max),
                    "--spec-draft-n-max",
                    str(args.draft_max),
                ],
            ),
        ):
            url = f"http://127.0.0.1:{free_port()}"
            command = [
                args.llama_server, "-m", str(gguf), "--alias", MODEL, "--host", "127.0.0.1",
                "--port", url.rsplit(":", 1)[1], "-c", str(args.context), "-np", "1",
                "-t", str(args.threads), "-tb", str(args.threads), "-b", str(args.batch),
                "-ub", str(args.batch), "--cache-ram", "0", "--no-repack", "--jinja",
                "--chat-template", "gemma", *extra_args,
            ]  # fmt: skip
            targets[name] = (command, url, ref_env)
        pids = {
            name: stack.enter_context(
                serving(command, url, folder / f"{name.replace(' ', '-')}.log", target_env)
            )
            for name, (command, url, target_env) in targets.items()
        }
        cpu: dict[tuple[str, str], list[float]] = {}

        speeds: dict[tuple[str, str], list[float]] = {}
        tokens: dict[tuple[str, str], int] = {}
        drafts: dict[str, dict[str, int]] = {}
        load = os.getloadavg()
        for round_ in range(args.rounds):
            for workload, max_tokens in (("edit", args.edit_tokens), ("chat", args.chat_tokens)):
                for name, (_, url, _) in targets.items():
                    request(url, workload, 1, prompt)  # the prompt into the slot's cache
                    used = cpu_seconds(pids[name])
                    count, wall, reported = request(url, workload, max_tokens, prompt)
                    cpu.setdefault((name, workload), []).append((cpu_seconds(pids[name]) - used) / count)
                    speeds.setdefault((name, workload), []).append(count / wall)
                    print(f"  {workload} {name}: {count} tokens, {count / wall:.1f}/s", file=sys.stderr)
                    tokens[(name, workload)] = count
                    if reported:
                        totals = drafts.setdefault(name, {})
                        for key, value in reported.items():
                            totals[key] = totals.get(key, 0) + value
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
            drafts.update({n: sluicegate_drafts(targets[n][1]) for n in targets if n == "sluicegate ngram"})
        load = tuple(round((a + b) / 2, 2) for a, b in zip(load, os.getloadavg(), strict=True))

    median = {key: statistics.median(values) for key, values in speeds.items()}
    print(f"\nGemma 3 270M Q4_K_M, {args.threads} threads, ngram {args.ngram}, draft_max {args.draft_max}, "
          f"{args.rounds} rounds, load average (1, 5, 15 min; mean of start and end) {load}\n")  # fmt: skip
    print(
        "| workload | server | tokens | tokens/s (median) | CPU ms per token (median) | drafted / accepted |"
    )
    print("|---|---|---:|---:|---:|---|")
    for workload in ("edit", "chat"):
        for name in targets:
            counts = drafts.get(name, {})
            drafted = (
                f"{counts.get('draft_n', 0)} / {counts.get('draft_n_accepted', 0)}" if "ngram" in name else ""
            )
            per_token = statistics.median(cpu[(name, workload)]) * 1000
            print(
                f"| {workload} | {name} | {tokens[(name, workload)]} | {median[(name, workload)]:.1f} | {per_token:.0f} | {drafted} |"
            )
    print(
        "\n| workload | ngram / none (Sluicegate) | ngram / none (llama-server) | Sluicegate ngram / llama-server ngram | Sluicegate / llama-server (none) |"
    )
    print("|---|---:|---:|---:|---:|")
    for workload in ("edit", "chat"):
        m = {name: median[(name, workload)] for name in targets}
        print(
            f"| {workload} | {m['sluicegate ngram'] / m['sluicegate']:.2f}x "
            f"| {m['llama-server ngram'] / m['llama-server']:.2f}x "
            f"| {m['sluicegate ngram'] / m['llama-server ngram']:.2f}x "
            f"| {m['sluicegate'] / m['llama-server']:.2f}x |"
        )
    print("\n(the drafted / accepted counts of Sluicegate are over every request, warm-ups included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
