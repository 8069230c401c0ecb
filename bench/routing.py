"""Benchmark: routing across upstream replicas (issue 46, part 4): `prefix_affinity` against
`least_busy` and `round_robin`, on three real llama-server replicas.

Run from the repository root (venv active), with a `llama-server` binary built from the
llama.cpp sources that the installed llama-cpp-python vendors (bench/README.md, "routing.py"):

    python bench/routing.py --llama-server /path/to/build/bin/llama-server

Three llama-server replicas serve one GGUF (Gemma 3 270M by default, `--model demo` for the
random-weight demo model), each with `--parallel` slots and one thread; one Sluicegate serves
three `openai` models over the same three replicas, one per policy (`least_busy`,
`round_robin`, `prefix_affinity`). The workload is a multi-turn chat: `--conversations`
conversations per policy, all with one short shared system prompt (the policy's own, so no
policy reuses another's cache), each with its own questions; a round sends every
conversation's next turn (the whole history so far, as chat clients do) with `--concurrency`
clients at once, and the next round starts when every reply is in. The policies run one after
the other, each on its own: interleaved, each policy's requests would overwrite the slots that
hold the others' conversations (llama-server keeps one prompt per slot).

Reported per policy: the prompt tokens the replicas say they took from their cache (usage
`prompt_tokens_details.cached_tokens`, which llama-server fills from its `cache_n`) against all
prompt tokens, mean and p50 time to first token (client side, through Sluicegate), and each
replica's load: requests served (from `X-Sluicegate-Replica`) and prompt tokens computed,
with the busiest against the mean. The issue's target: `prefix_affinity` >= 2x the cached
tokens of `least_busy`, a lower mean TTFT, and no replica above 1.5x the mean load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from batching import gemma_gguf
from local_engine import free_port, serving
from sluicegate.demo.model import make_demo_gguf

ALIAS = "bench"
POLICIES = ("least_busy", "round_robin", "prefix_affinity")
SYSTEM = (
    "You are the help desk of a small public library: opening hours, membership, loans, late "
    "fees, printing, study rooms and events. Answer in two short sentences."
)
TOPICS = [
    "renewing a book", "the book club", "printing a document", "a lost library card",
    "booking a study room", "story time", "e-books on a tablet", "a late fee",
    "an interlibrary loan", "the reading room", "membership for a visitor", "audio books",
    "the author talk", "scanning old photos", "donating books", "the children's corner",
]  # fmt: skip
QUESTIONS = [
    "Hello! I have a question about {topic}.",
    "What do I need to bring for {topic}?",
    "Is there anything that costs money with {topic}?",
    "Can I do {topic} on a Saturday?",
    "And one last thing about {topic}: who can help me at the desk?",
    "Thank you. Could you sum up what you told me about {topic}?",
]


@dataclass
class Result:
    ttft: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    requests: dict[str, int] = field(default_factory=dict)  # per replica
    computed: dict[str, int] = field(default_factory=dict)  # prompt tokens not from a cache
    errors: int = 0
    moves: int = 0  # turns a conversation went to another replica than its previous turn
    homes: dict[int, str] = field(default_factory=dict)  # conversation → its last turn's replica


def ask(
    client: httpx.Client, model: str, messages: list[dict[str, str]], max_tokens: int
) -> tuple[str, float, dict[str, Any], str]:
    """One streamed turn: (reply text, TTFT in seconds, usage, the replica that served)."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    text, first = "", 0.0
    usage: dict[str, Any] = {}
    sent = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        replica = response.headers.get("x-sluicegate-replica", "?")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content") or ""
                if piece and not first:
                    first = time.perf_counter() - sent
                text += delta.get("content") or ""
            usage = chunk.get("usage") or usage
    return text, first or (time.perf_counter() - sent), usage, replica


def run_round(
    base_url: str, policy: str, chats: list[list[dict[str, str]]], turn: int, args: argparse.Namespace,
    result: Result,
) -> None:  # fmt: skip
    """Every conversation's next turn, `concurrency` at once."""

    def one(i: int) -> None:
        messages = chats[i]
        question = QUESTIONS[turn % len(QUESTIONS)].format(topic=TOPICS[i % len(TOPICS)])
        messages.append({"role": "user", "content": f"(visitor {i}) {question}"})
        try:
            with httpx.Client(base_url=base_url, timeout=600) as client:
                text, ttft, usage, replica = ask(client, policy, messages, args.max_tokens)
        except httpx.HTTPError as exc:
            print(f"  {policy} conversation {i} turn {turn}: {exc}", file=sys.stderr)
            result.errors += 1
            messages.pop()
            return
        messages.append({"role": "assistant", "content": text or "(no answer)"})
        prompt = int(usage.get("prompt_tokens", 0))
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        result.ttft.append(ttft)
        result.prompt_tokens += prompt
        result.cached_tokens += cached
        result.requests[replica] = result.requests.get(replica, 0) + 1
        if result.homes.get(i, replica) != replica:
            result.moves += 1
        result.homes[i] = replica
        result.computed[replica] = result.computed.get(replica, 0) + prompt - cached

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(one, range(len(chats))))


def sluicegate_config(
    replicas: list[str], health_check_interval: float = 0.5, load_reports: bool = True
) -> str:
    urls = ", ".join(f'"{url}/v1"' for url in replicas)
    tables = [
        f'[[models]]\nid = "{policy}"\nengine = "openai"\nbase_urls = [{urls}]\n'
        f'upstream_model = "{ALIAS}"\nrouting = "{policy}"\nfirst_byte_timeout = 600\n'
        # Health checks every half second poll the replicas' /slots and /metrics too: the
        # load they report (routing_load_reports, on by default).
        f"health_check_interval = {health_check_interval}\n"
        f"routing_load_reports = {'true' if load_reports else 'false'}\n"
        for policy in POLICIES
    ]
    return '[server]\nhost = "127.0.0.1"\n\n' + "\n".join(tables)


def report(results: dict[str, Result], replicas: list[str]) -> None:
    print()
    print(
        "| policy | prompt tokens | cached | cached share | TTFT mean | TTFT p50 | requests per replica | busiest / mean | moves | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for policy, r in results.items():
        per = [r.requests.get(f"{url}/v1", 0) for url in replicas]
        mean = statistics.mean(per) if per else 0
        busiest = max(per) / mean if mean else 0.0
        share = r.cached_tokens / r.prompt_tokens if r.prompt_tokens else 0.0
        ttft_mean = statistics.mean(r.ttft) if r.ttft else 0.0
        ttft_p50 = statistics.median(r.ttft) if r.ttft else 0.0
        print(
            f"| {policy} | {r.prompt_tokens} | {r.cached_tokens} | {share:.0%} | {ttft_mean * 1000:.0f} ms "
            f"| {ttft_p50 * 1000:.0f} ms | {' / '.join(map(str, per))} | {busiest:.2f} | {r.moves} | {r.errors} |"
        )
    print()
    print("prompt tokens computed per replica (not from a cache):")
    for policy, r in results.items():
        print(f"  {policy}: " + " / ".join(str(r.computed.get(f"{url}/v1", 0)) for url in replicas))
    base, ours = results.get("least_busy"), results.get("prefix_affinity")
    if base and ours and base.cached_tokens:
        ratio = ours.cached_tokens / base.cached_tokens
        faster = statistics.mean(ours.ttft) / statistics.mean(base.ttft) if base.ttft and ours.ttft else 0
        print(f"\nprefix_affinity / least_busy: {ratio:.2f}x the cached tokens, {faster:.2f}x the mean TTFT")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", required=True, help="the llama-server binary")
    parser.add_argument("--model", choices=["gemma", "demo"], default="gemma")
    parser.add_argument("--gguf", type=Path, help="another GGUF instead")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=6, help="slots per llama-server replica (-np)")
    parser.add_argument("--context", type=int, default=2048, help="context per slot")
    parser.add_argument("--threads", type=int, default=1, help="threads per replica")
    parser.add_argument("--conversations", type=int, default=16, help="per policy")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=6, help="clients at once, per policy's round")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--policies", nargs="+", choices=POLICIES, default=list(POLICIES), help="run in this order"
    )
    parser.add_argument(
        "--llama-server-arg", action="append", default=[], help="one more llama-server argument (repeatable)"
    )
    parser.add_argument(
        "--no-load-reports",
        action="store_true",
        help="route on Sluicegate's own in-flight counts only (no /slots, /metrics, id_slot)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the folder with the servers' logs")
    args = parser.parse_args()

    with contextlib.ExitStack() as cleanup:
        folder = Path(tempfile.mkdtemp(prefix="sluicegate-bench-routing-"))
        if not args.keep:
            cleanup.callback(shutil.rmtree, folder, True)
        if args.gguf:
            gguf = args.gguf
        elif args.model == "gemma":
            gguf = gemma_gguf()
        else:
            gguf = make_demo_gguf(folder / "bench.gguf", size="bench")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLUICEGATE_CONFIG")}
        replicas = [f"http://127.0.0.1:{free_port()}" for _ in range(args.replicas)]
        with contextlib.ExitStack() as stack:
            for i, url in enumerate(replicas):
                command = [
                    args.llama_server, "-m", str(gguf), "--alias", ALIAS, "--host", "127.0.0.1",
                    "--port", url.rsplit(":", 1)[1], "-np", str(args.parallel),
                    "-c", str(args.context * args.parallel), "-t", str(args.threads),
                    "-tb", str(args.threads),
                    # Each slot's own KV cache is the cache measured (no host-memory prompt
                    # cache: on this machine it cost ~300 ms per request, bench/batching.py).
                    "--cache-ram", "0",
                    # The wheel's AMX repack kernels stop on an illegal instruction here.
                    "--no-repack",
                    # /metrics (requests processing and deferred) beside /slots, for routing by load.
                    "--metrics",
                    # Full-size caches for sliding-window layers (Gemma 3's): without, llama-server
                    # cannot cut a slot's cache back to a shared prefix and recomputes it all.
                    "--swa-full",
                    # Gemma's GGUF has no template: llama.cpp's built-in `gemma` one, which is
                    # not a Jinja template (with --jinja, "gemma" would be the template's text).
                    *(["--no-jinja", "--chat-template", "gemma"] if args.model == "gemma" and not args.gguf else []),
                    *args.llama_server_arg,
                ]  # fmt: skip
                stack.enter_context(serving(command, url, folder / f"replica{i}.log", env))
            config = folder / "sluicegate.toml"
            config.write_text(sluicegate_config(replicas, load_reports=not args.no_load_reports))
            ours = f"http://127.0.0.1:{free_port()}"
            ours_env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
            ours_env.pop("SLUICEGATE_CONFIG", None)
            command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
            stack.enter_context(
                serving(
                    [*command, "--port", ours.rsplit(":", 1)[1]], ours, folder / "sluicegate.log", ours_env
                )
            )
            print(
                f"{args.replicas} llama-server replicas x {args.parallel} slots, {gguf.name}; "
                f"{args.conversations} conversations x {args.turns} turns per policy, "
                f"{args.concurrency} at once"
            )
            results = {policy: Result() for policy in POLICIES}
            chats = {
                policy: [
                    [{"role": "system", "content": f"[{policy} desk] {SYSTEM}"}]
                    for _ in range(args.conversations)
                ]
                for policy in POLICIES
            }
            for policy in args.policies:
                started = time.monotonic()
                for turn in range(args.turns):
                    run_round(ours, policy, chats[policy], turn, args, results[policy])
                print(f"  {policy}: {args.turns} rounds in {time.monotonic() - started:.0f} s")
            report({p: results[p] for p in args.policies}, replicas)


if __name__ == "__main__":
    main()
