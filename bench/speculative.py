"""Benchmark: speculative decoding in Sluicegate (n-gram drafts, a request's `prediction`),
and in llama-server when given.

Run from the repository root (venv active), without nice, with the `llama-server` built from
the llama.cpp the installed llama-cpp-python vendors (see bench/README.md); without
`--llama-server`, Sluicegate alone:

    python bench/speculative.py [--llama-server /path/to/llama-server] [--rounds 3]

Gemma 3 270M (Q4_K_M, a base model; the GGUF the tests assemble into ~/.cache/sluicegate-tests),
one sequence of `--context` tokens, the same threads and batch size everywhere. The servers run
at once (an idle one costs nothing) and every round visits each in turn, so a shared machine's
drifting load spreads over all of them:

- Sluicegate without speculation, and with `speculative = "ngram"` (its defaults: the
  adaptive drafting of engines/llamacpp/adaptive.py);
- llama-server without, and with `--spec-type ngram-simple` (its n-gram lookup, the same
  n-gram size and draft length).

Workloads, temperature 0, one user:

- edit: `/v1/completions` continuing a source file that the prompt shows first (a file of this
  repository as it was, frozen in bench/texts/ like the files of predict and rename, then the
  marker of a second copy and its first lines): the model writes the file
  out again, which is what an agent rewriting a file it was shown does;
- continue: `/v1/completions` continuing a source file of many functions alike, each with new
  names and numbers: the n-grams match (the shape repeats) but drafts mostly miss (the names
  and numbers do not). Speculation must not cost here;
- chat: `/v1/chat/completions` with a question no part of the prompt answers;
- predict: `/v1/chat/completions` asking for an edit of a `--predict-lines`-line file, the
  reply started with the file's first lines (`continue_final_message`), with the file as
  OpenAI's `prediction` (Sluicegate; llama-server has no `prediction` and gets the request
  without); predict-none: the same request without `prediction`.

Each request is sent first with max_tokens 1, then timed: its prompt is then in the slot's KV
cache on every server (all but the last token), so the time is the decode's.
Tokens/s = the server's completion tokens / the request's wall time; the median over rounds.
Also the server process's CPU time (user + system, all threads) per completion token, which a
busy machine's waiting does not inflate (llama.cpp's spinning threads do, alike on both).
Drafted and taken tokens: llama-server's `timings`, Sluicegate's usage
(`completion_tokens_details.accepted_prediction_tokens` / `rejected_prediction_tokens`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import speculation_replay
from batching import gemma_gguf
from local_engine import cpu_seconds, free_port, serving

MODEL = "bench"
# The source files the edit, predict and rename workloads show, frozen as they were on main on
# 2026-11-29 (e03f5b1): read from src/, each change to those files moved the texts and so the
# figures of every round after it.
TEXTS = Path(__file__).resolve().parent / "texts"
QUESTION = "Explain how the tides work, and why there are two high tides a day."
WORKLOADS = ("edit", "continue", "chat", "predict", "predict-none", "rename", "rename-none")
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "river",
    "stone",
    "cloud",
    "ember",
    "frost",
    "grove",
    "harbor",
    "iris",
    "jade",
    "kite",
    "lumen",
    "maple",
    "nova",
    "orbit",
    "pebble",
    "quartz",
    "raven",
    "sable",
    "thorn",
    "umber",
    "vale",
    "willow",
    "yarrow",
    "zephyr",
]
EDITED = TEXTS / "edit_stops.py.txt"  # engines/llamacpp/stops.py
PREDICTED = TEXTS / "predict_engine.py.txt"  # engines/llamacpp/engine.py: 300 lines and more
# The rename workload's file: 300 lines of code dense in the name renamed (`slot`: ~100 times).
RENAMED = TEXTS / "rename_speculative.py.txt"  # engines/llamacpp/speculative.py
RENAME = ("slot", "lane")


def edit_prompt(lines: int) -> str:
    """A source file shown twice, then the start of its third copy: a repetitive source file
    for a base model to continue (it then copies; shown once, Gemma 3 270M writes a file of
    its own after a few lines)."""
    source = "\n".join(EDITED.read_text().splitlines()[:lines])
    head = "\n".join(source.splitlines()[:3])
    return f"# stops.py\n{source}\n\n# stops.py (copy 2)\n{source}\n\n# stops.py (copy 3)\n{head}\n"


def continued_prompt(functions: int) -> str:
    """A file of `functions` helpers alike but for their names and numbers, open at the next
    one: a base model writes more of them, each with new names and numbers."""
    rng = random.Random(7)
    parts = ["# units.py: one scaling helper per unit pair\n\n"]
    for _ in range(functions):
        a, b = rng.sample(WORDS, 2)
        factor, offset = rng.randint(2, 999), rng.randint(1, 99)
        parts.append(
            f"def scale_{a}_{b}(value: float) -> float:\n"
            f'    """Scale a value by the {a}-{b} factor."""\n'
            f"    factor = {factor}\n"
            f"    return value * factor + {offset}\n\n\n"
        )
    parts.append("def scale_")
    return "".join(parts)


def predict_messages(lines: int) -> tuple[list[dict[str, str]], str]:
    """(the messages of an edit of a `lines`-line file, the prediction: the file itself)."""
    source = "\n".join(PREDICTED.read_text().splitlines()[:lines]) + "\n"
    ask = (
        "Rename the variable `runtime` to `backend` everywhere in this file and reply with the "
        f"whole file:\n\n```python\n{source}```"
    )
    head = "\n".join(source.splitlines()[:2]) + "\n"
    messages = [{"role": "user", "content": ask}, {"role": "assistant", "content": f"```python\n{head}"}]
    return messages, source[len(head) :]


def rename_messages(first: int, lines: int, shown: int) -> tuple[list[dict[str, str]], str]:
    """(the messages of a rename in a `lines`-line file, the prediction: the file as it is).

    Framed as a completion, which Gemma 3 270M (a base model) follows where it does not follow
    an instruction: a short before/after example of the same rename, the file "before", then
    "after:" and the file's first `shown` lines renamed, in the reply (`continue_final_message`).
    The model writes the rest; the prediction is the rest of the file as it was sent (what a
    client editing it holds), so every occurrence of the name it renames leaves the prediction."""
    old, new = RENAME
    source = "\n".join(RENAMED.read_text().splitlines()[first : first + lines]) + "\n"
    example = f"def load({old}s, {old}_id):\n    {old} = {old}s[{old}_id]\n    {old}.start()\n    return {old}.model\n"
    shots = f"before:\n```python\n{example}```\nafter:\n```python\n{example.replace(old, new)}```\n\n"
    ask = f"Rename `{old}` to `{new}` everywhere in the code.\n\n{shots}before:\n```python\n{source}```"
    head = "".join(source.splitlines(keepends=True)[:shown])
    messages = [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": f"after:\n```python\n{head.replace(old, new)}"},
    ]
    return messages, source[len(head) :]


def request(url: str, body: dict[str, Any], max_tokens: int) -> tuple[int, float, dict[str, int], str]:
    """(completion tokens, wall seconds, draft counts: drafted and taken, the reply's text)."""
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    body = {**body, "model": MODEL, "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    reply = httpx.post(url + path, json=body, timeout=1800)
    wall = time.perf_counter() - start
    reply.raise_for_status()
    data = reply.json()
    timings = data.get("timings") or {}
    drafts = {k: int(timings[k]) for k in ("draft_n", "draft_n_accepted") if k in timings}
    details = data["usage"].get("completion_tokens_details") or {}
    taken, refused = details.get("accepted_prediction_tokens"), details.get("rejected_prediction_tokens")
    if taken is not None and refused is not None:  # Sluicegate's per-request counts
        drafts = {"draft_n": int(taken) + int(refused), "draft_n_accepted": int(taken)}
    choice = data["choices"][0]
    text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
    return int(data["usage"]["completion_tokens"]), wall, drafts, text


def sluicegate_drafts(url: str) -> dict[str, int]:
    """Sluicegate's draft counters so far (`/metrics`): for `/v1/completions`, whose usage has no
    per-request draft counts."""
    text = httpx.get(url + "/metrics", timeout=10).text
    found = {}
    for name, key in (("draft_tokens_total", "draft_n"), ("draft_tokens_accepted_total", "draft_n_accepted")):
        match = re.search(rf"^sluicegate_llamacpp_{name}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        found[key] = int(float(match[1])) if match else 0
    return found


def greedy_tokens(url: str, prompt: str, max_tokens: int) -> tuple[list[int], list[int]]:
    """(the prompt's tokens, the greedy output's) from llama-server's `/tokenize` and
    `/completion` (`return_tokens`), which both servers answer; the prompt first sent alone, as
    the timed requests are."""
    tokenized = httpx.post(url + "/tokenize", json={"content": prompt, "add_special": True}, timeout=60)
    tokenized.raise_for_status()
    body = {"prompt": prompt, "temperature": 0, "cache_prompt": True}
    httpx.post(url + "/completion", json={**body, "n_predict": 1}, timeout=1800).raise_for_status()
    reply = httpx.post(
        url + "/completion", json={**body, "n_predict": max_tokens, "return_tokens": True}, timeout=1800
    )
    reply.raise_for_status()
    return [int(t) for t in tokenized.json()["tokens"]], [int(t) for t in reply.json()["tokens"]]


def replay(
    args: argparse.Namespace,
    targets: dict[str, tuple[Any, str, Any]],
    workloads: dict[str, int],
    sent: dict[str, dict[str, Any]],
) -> None:
    """Both drafting policies on each server's own greedy text (speculation_replay.py)."""
    print("\nDrafting policies replayed on each server's greedy output (token ids; no model, no clock)\n")
    print(
        "| workload | text written by | policy | drafted | taken | acceptance | decode steps | tokens per step |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for workload, max_tokens in workloads.items():
        if "prompt" not in sent[workload]:  # text completions only: their prompt is the text
            continue
        writers = {name.split()[0]: url for name, (_, url, _) in targets.items()}
        for writer, url in writers.items():
            prompt, output = greedy_tokens(url, sent[workload]["prompt"], max_tokens)
            for policy, counts in (
                (
                    "Sluicegate (adaptive)",
                    speculation_replay.ours(prompt, output, args.ngram, args.draft_max),
                ),
                ("ngram-simple", speculation_replay.ngram_simple(prompt, output, args.ngram, args.draft_max)),
            ):
                drafted, taken, steps = counts
                share = f"{taken / drafted:.0%}" if drafted else "-"
                print(
                    f"| {workload} | {writer} | {policy} | {drafted} | {taken} | {share} | {steps + 1} "
                    f"| {len(output) / (steps + 1):.2f} |"
                )


def replay_predictions(
    args: argparse.Namespace,
    targets: dict[str, tuple[Any, str, Any]],
    sent: dict[str, dict[str, Any]],
    texts: dict[tuple[str, str], str],
) -> None:
    """A request's `prediction` replayed on Sluicegate's reply to it, learning the edit and not
    (prediction.py before issue 48's rename round), and the n-gram lookup alone. The reply's
    text is tokenized again (its own tokens are not in the usage): a replay, close to the live
    counts, not the same."""

    def tokens(url: str, content: str, special: bool) -> list[int]:
        reply = httpx.post(url + "/tokenize", json={"content": content, "add_special": special}, timeout=60)
        reply.raise_for_status()
        return [int(t) for t in reply.json()["tokens"]]

    print("\n`prediction` replayed on Sluicegate's reply (re-tokenized; no model, no clock)\n")
    print("| workload | policy | tokens | drafted | taken | acceptance | decode steps | tokens per step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, workload), text in texts.items():
        body = sent[workload]
        if name != "sluicegate" or "prediction" not in body:
            continue
        url = targets[name][1]
        shape = {k: body[k] for k in ("messages", "continue_final_message", "add_generation_prompt")}
        templated = httpx.post(url + "/apply-template", json=shape, timeout=60)
        templated.raise_for_status()
        prompt = tokens(url, templated.json()["prompt"], True)
        output = tokens(url, text, False)
        predicted = tokens(url, body["prediction"]["content"], False)
        if args.keep_replies:  # the token ids, to replay other policies on later
            folder = Path(args.keep_replies)
            folder.mkdir(parents=True, exist_ok=True)
            record = {"prompt": prompt, "output": output, "prediction": predicted, "text": text}
            (folder / f"{workload}.json").write_text(json.dumps(record))
        for policy, counts in (
            (
                "prediction, learning the edit",
                speculation_replay.predicted(prompt, output, predicted, args.draft_max),
            ),
            (
                "prediction, not learning",
                speculation_replay.predicted(prompt, output, predicted, args.draft_max, learn=False),
            ),
            ("n-gram lookup alone", speculation_replay.ours(prompt, output, args.ngram, args.draft_max)),
        ):
            drafted, taken, steps = counts
            share = f"{taken / drafted:.0%}" if drafted else "-"
            print(
                f"| {workload} | {policy} | {len(output)} | {drafted} | {taken} | {share} | {steps + 1} "
                f"| {len(output) / (steps + 1):.2f} |"
            )


def bodies(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    messages, predicted = predict_messages(args.predict_lines)
    renamed, rest = rename_messages(args.rename_first, args.predict_lines, args.rename_shown)
    return {
        "edit": {"prompt": edit_prompt(args.lines)},
        "continue": {"prompt": continued_prompt(args.functions)},
        "chat": {"messages": [{"role": "user", "content": QUESTION}]},
        "predict": {
            "messages": messages,
            "continue_final_message": True,
            "add_generation_prompt": False,
            "prediction": {"type": "content", "content": predicted},
        },
        "predict-none": {
            "messages": messages,
            "continue_final_message": True,
            "add_generation_prompt": False,
        },
        "rename": {
            "messages": renamed,
            "continue_final_message": True,
            "add_generation_prompt": False,
            "prediction": {"type": "content", "content": rest},
        },
        "rename-none": {"messages": renamed, "continue_final_message": True, "add_generation_prompt": False},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", help="the llama-server binary (without: Sluicegate alone)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--ngram", type=int, default=12, help="n-gram size (llama-server's default)")
    parser.add_argument("--draft-max", type=int, default=16)
    parser.add_argument("--edit-tokens", type=int, default=256)
    parser.add_argument("--continue-tokens", type=int, default=400)
    parser.add_argument("--chat-tokens", type=int, default=128)
    parser.add_argument("--predict-tokens", type=int, default=512)
    parser.add_argument("--lines", type=int, default=32, help="edit: lines of the source file in the prompt")
    parser.add_argument("--functions", type=int, default=24, help="continue: functions in the prompt")
    parser.add_argument("--predict-lines", type=int, default=300, help="predict: lines of the file edited")
    parser.add_argument(
        "--rename-first", type=int, default=107, help="rename: the file's first line (0-based) shown"
    )
    parser.add_argument(
        "--rename-shown", type=int, default=8, help="rename: the file's lines begun in the reply"
    )
    parser.add_argument("--keep-replies", help="--replay: also write the replayed token ids to this folder")
    parser.add_argument("--sample-lines", type=int, default=12, help="rename: lines of each reply printed")
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="only these (repeatable)")
    parser.add_argument("--only", action="append", help="only these servers, by name (repeatable)")
    parser.add_argument(
        "--replay",
        action="store_true",
        help="also replay both drafting policies on each server's greedy output (edit, continue), "
        "and a prediction learning the edit and not on Sluicegate's replies (predict, rename)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the servers
    gguf = gemma_gguf()
    workloads = {
        "edit": args.edit_tokens,
        "continue": args.continue_tokens,
        "chat": args.chat_tokens,
        "predict": args.predict_tokens,
        "predict-none": args.predict_tokens,
        "rename": args.predict_tokens,
        "rename-none": args.predict_tokens,
    }
    workloads = {name: n for name, n in workloads.items() if not args.workload or name in args.workload}
    sent = bodies(args)

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        base = (
            f'[server]\nlog_level = "warning"\n# no deadline: llama-server has none, and a loaded machine is slow\nrequest_timeout_seconds = 0\nidle_timeout_seconds = 0\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
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
            if not args.llama_server:
                break
            url = f"http://127.0.0.1:{free_port()}"
            command = [
                args.llama_server, "-m", str(gguf), "--alias", MODEL, "--host", "127.0.0.1",
                "--port", url.rsplit(":", 1)[1], "-c", str(args.context), "-np", "1",
                "-t", str(args.threads), "-tb", str(args.threads), "-b", str(args.batch),
                "-ub", str(args.batch), "--cache-ram", "0", "--no-repack",
                # llama.cpp's built-in `gemma` template (after --jinja, "gemma" would be the
                # template's own text: a 3-token prompt), as Sluicegate's fallback for Gemma.
                "--no-jinja", "--chat-template", "gemma", *extra_args,
            ]  # fmt: skip
            targets[name] = (command, url, ref_env)
        if args.only:
            targets = {name: target for name, target in targets.items() if name in args.only}
        pids = {
            name: stack.enter_context(
                serving(command, url, folder / f"{name.replace(' ', '-')}.log", target_env)
            )
            for name, (command, url, target_env) in targets.items()
        }
        cpu: dict[tuple[str, str], list[float]] = {}
        speeds: dict[tuple[str, str], list[float]] = {}
        tokens: dict[tuple[str, str], int] = {}
        drafts: dict[tuple[str, str], dict[str, int]] = {}
        last: dict[tuple[str, str], dict[str, int]] = {}  # the last round's request's counts
        texts: dict[tuple[str, str], str] = {}  # the last round's replies
        load = os.getloadavg()
        for round_ in range(args.rounds):
            for workload, max_tokens in workloads.items():
                for name, (_, url, _) in targets.items():
                    body = sent[workload]
                    if name.startswith("llama-server"):  # it has no `prediction`
                        body = {k: v for k, v in body.items() if k != "prediction"}
                    request(url, body, 1)  # the prompt into the slot's cache
                    ours = name.startswith("sluicegate")
                    before = sluicegate_drafts(url) if ours else {}
                    used = cpu_seconds(pids[name])
                    count, wall, reported, texts[(name, workload)] = request(url, body, max_tokens)
                    if ours and not reported:
                        after = sluicegate_drafts(url)
                        reported = {key: after[key] - before[key] for key in after}
                    cpu.setdefault((name, workload), []).append((cpu_seconds(pids[name]) - used) / count)
                    speeds.setdefault((name, workload), []).append(count / wall)
                    print(
                        f"  {workload} {name}: {count} tokens, {count / wall:.1f}/s {reported}",
                        file=sys.stderr,
                    )
                    tokens[(name, workload)] = count
                    last[(name, workload)] = {"draft_n": 0, "draft_n_accepted": 0, **reported}
                    totals = drafts.setdefault((name, workload), {})
                    for key, value in reported.items():
                        totals[key] = totals.get(key, 0) + value
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
        load = tuple(round((a + b) / 2, 2) for a, b in zip(load, os.getloadavg(), strict=True))
        if args.replay:
            replay(args, targets, workloads, sent)
            replay_predictions(args, targets, sent, texts)

    median = {key: statistics.median(values) for key, values in speeds.items()}
    print(f"\nGemma 3 270M Q4_K_M, {args.threads} threads, ngram {args.ngram}, draft_max {args.draft_max}, "
          f"{args.rounds} rounds, load average (1, 5, 15 min; mean of start and end) {load}\n")  # fmt: skip
    print(
        "| workload | server | tokens | tokens/s (median) | CPU ms per token (median) | drafted / accepted (timed requests) |"
    )
    print("|---|---|---:|---:|---:|---|")
    for workload in workloads:
        for name in targets:
            counts = drafts.get((name, workload), {})
            drafted = f"{counts['draft_n']} / {counts['draft_n_accepted']}" if counts.get("draft_n") else ""
            per_token = statistics.median(cpu[(name, workload)]) * 1000
            print(
                f"| {workload} | {name} | {tokens[(name, workload)]} | {median[(name, workload)]:.1f} | {per_token:.0f} | {drafted} |"
            )

    # Decode steps and draft counts: at temperature 0 they do not depend on the machine's load
    # (speeds do). Each decode step writes one token and the draft tokens taken in it, so
    # steps = tokens - taken (the first token's step, the prompt's last, counted as one).
    print("\nDraft counts and decode steps (the last round's request; greedy, load-independent)\n")
    print("| workload | server | tokens | drafted | taken | acceptance | decode steps | tokens per step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for workload in workloads:
        for name in targets:
            count, counts = tokens[(name, workload)], last[(name, workload)]
            drafted, taken = counts["draft_n"], counts["draft_n_accepted"]
            steps = count - taken
            share = f"{taken / drafted:.0%}" if drafted else "-"
            print(
                f"| {workload} | {name} | {count} | {drafted} | {taken} | {share} | {steps} | {count / steps:.2f} |"
            )

    def ratio(a: tuple[str, str], b: tuple[str, str]) -> str:
        return f"{median[a] / median[b]:.2f}x" if a in median and b in median else "-"

    print(
        "\n| workload | ngram / none (Sluicegate) | ngram / none (llama-server) | Sluicegate ngram / llama-server ngram | Sluicegate / llama-server (none) |"
    )
    print("|---|---:|---:|---:|---:|")
    for w in workloads:
        print(
            f"| {w} | {ratio(('sluicegate ngram', w), ('sluicegate', w))} "
            f"| {ratio(('llama-server ngram', w), ('llama-server', w))} "
            f"| {ratio(('sluicegate ngram', w), ('llama-server ngram', w))} "
            f"| {ratio(('sluicegate', w), ('llama-server', w))} |"
        )
    for (name, workload), text in texts.items():
        if workload.startswith("rename"):  # does the model make the edit? (a sample of it)
            old, new = RENAME
            print(
                f"\n{workload}, {name}: {text.count(old)} `{old}` and {text.count(new)} `{new}` in the reply"
            )
            print("\n".join(text.splitlines()[: args.sample_lines]))
    if "rename" in workloads and "rename-none" in workloads:
        p, none = "rename", "rename-none"
        print(
            f"\nrename: prediction / none, Sluicegate without speculative: {ratio(('sluicegate', p), ('sluicegate', none))}; "
            f"with ngram: {ratio(('sluicegate ngram', p), ('sluicegate ngram', none))}; "
            f"Sluicegate with prediction / llama-server ngram: {ratio(('sluicegate', p), ('llama-server ngram', none))}"
        )
    if "predict" in workloads and "predict-none" in workloads:
        p, none = "predict", "predict-none"
        print(
            f"\nprediction / none, Sluicegate without speculative: {ratio(('sluicegate', p), ('sluicegate', none))}; "
            f"with ngram: {ratio(('sluicegate ngram', p), ('sluicegate ngram', none))}; "
            f"Sluicegate with prediction / llama-server ngram: {ratio(('sluicegate', p), ('llama-server ngram', none))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
