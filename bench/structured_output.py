"""Benchmark: what grammar-constrained decoding costs in the llamacpp engine.

Run from the repository root (venv active):

    python bench/structured_output.py

One Sluicegate server, one GGUF (by default the random-weight bench model from
`make_demo_gguf(size="bench", ends_replies=False)`, its vocabulary padded to `--vocab` tokens
(default 32,000) because the grammar sampler's work grows with the vocabulary), streaming Chat Completions requests with
greedy sampling, alternating in the same run between a plain request and the same request
with a `json_schema` response_format. The schema (an object with at least 200 short strings)
cannot close within `max_tokens`, so both kinds of reply run to exactly `max_tokens` tokens.
Each request starts with its run number, so no prompt is reused from the KV cache.

Per request: decode tokens/s = (max_tokens - 1) / (last delta - first delta), the server's
CPU time per token (all its threads, from /proc: the view that a busy machine disturbs least),
and TTFT. It prints the medians and the ratios with / without a grammar. Absolute numbers
depend on the machine.

Reported apart from decoding: what the first structured request after a load waits for beyond
a later one (TTFT of the first `json_schema` request, sent right after one short plain request,
minus the median `json_schema` TTFT: the vocabulary view, if it is not ready yet), and, in
process on the same GGUF, the vocabulary view's build time and the per-request grammar compile
time (validating the schema while the request is checked, and compiling it against the
vocabulary on the worker), medians of `--compiles`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from llguidance import LLMatcher

sys.path.insert(0, str(Path(__file__).parent))
from local_engine import STORY, cpu_seconds, free_port, serving
from sluicegate.demo.model import base_vocab_size, make_demo_gguf
from sluicegate.engines.llamacpp.constrained import vocab_tokenizer
from sluicegate.engines.llamacpp.grammar import json_schema_grammar
from sluicegate.engines.llamacpp.runtime import Vocabulary

MODEL = "bench"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "notes": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 200},
        "done": {"type": "boolean"},
    },
    "required": ["notes", "done"],
    "additionalProperties": False,
}


@contextlib.contextmanager
def _log_on_failure(log: Path) -> Iterator[None]:
    try:
        yield
    except Exception:
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise


def compile_times(gguf: Path, compiles: int) -> tuple[float, float, float]:
    """In process: the vocabulary view's build, then the median request-time check and worker
    compile of SCHEMA (seconds)."""
    vocabulary = Vocabulary(gguf)
    try:
        start = time.perf_counter()
        tokenizer = vocab_tokenizer(vocabulary.model.vocab)
        view = time.perf_counter() - start
        checks, builds = [], []
        for _ in range(compiles):
            start = time.perf_counter()
            grammar = json_schema_grammar(SCHEMA, "response_format")
            checks.append(time.perf_counter() - start)
            start = time.perf_counter()
            matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
            builds.append(time.perf_counter() - start)
            assert not matcher.is_error(), matcher.get_error()
        del tokenizer
    finally:
        vocabulary.close()
    return view, statistics.median(checks), statistics.median(builds)


def measure(base_url: str, pid: int, run: int, max_tokens: int, grammar: bool) -> tuple[float, float, float]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Run {run}. {STORY}"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    if grammar:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "notes", "schema": SCHEMA}}
    times: list[float] = []
    text, finish = "", None
    cpu = cpu_seconds(pid)
    sent = time.perf_counter()
    with (
        httpx.Client(timeout=600) as client,
        client.stream("POST", base_url + "/v1/chat/completions", json=body) as response,
    ):
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                if content := choice["delta"].get("content"):
                    times.append(time.perf_counter())
                    text += content
                finish = choice.get("finish_reason") or finish
    cpu = cpu_seconds(pid) - cpu
    if finish != "length":
        raise RuntimeError(f"the reply ended with {finish!r}, not 'length'")
    head = text[1:].lstrip()  # the schema's JSON: `{`, maybe a space, then the first key
    if grammar and not (text.startswith("{") and (head.startswith('"notes"') or '"notes"'.startswith(head))):
        raise RuntimeError(f"the grammar did not hold: {text[:80]!r}")
    return (max_tokens - 1) / (times[-1] - times[0]), cpu / max_tokens, times[0] - sent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gguf", type=Path, help="default: write the bench demo model to a temp folder")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compiles", type=int, default=20, help="in-process grammar compiles to time")
    parser.add_argument(
        "--vocab",
        type=int,
        default=32000,
        help="vocabulary size of the demo model (the grammar checks every token)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = args.gguf or make_demo_gguf(
            folder / "bench.gguf",
            size="bench",
            ends_replies=False,
            extra_vocab=max(args.vocab - base_vocab_size(), 0),
        )
        config = folder / "sluicegate.toml"
        config.write_text(
            f'[server]\nlog_level = "warning"\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
            f'path = "{gguf}"\ncontext_length = 2048\nthreads = {args.threads}\n'
        )
        base_url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        command += ["--port", base_url.rsplit(":", 1)[1]]
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        ttfts: dict[bool, list[float]] = {False: [], True: []}
        log = folder / "sluicegate.log"
        with serving(command, base_url, log, env) as pid, _log_on_failure(log):
            measure(base_url, pid, -1, 8, grammar=False)  # warm-up: loads the model
            first_structured = measure(base_url, pid, -2, 8, grammar=True)[2]
            for run in range(args.runs):
                for grammar in (False, True) if run % 2 == 0 else (True, False):
                    rate, cpu, ttft = measure(base_url, pid, run, args.max_tokens, grammar)
                    rates[grammar].append(rate)
                    cpus[grammar].append(cpu)
                    ttfts[grammar].append(ttft)
                    print(
                        f"run {run} {'grammar' if grammar else 'plain':8} decode {rate:6.1f} tok/s"
                        f"  server CPU {cpu * 1000:7.2f} ms/token  TTFT {ttft * 1000:7.1f} ms",
                        flush=True,
                    )
        view, check, build = compile_times(gguf, args.compiles)

    def ratio(values: dict[bool, list[float]]) -> str:
        of_medians = statistics.median(values[True]) / statistics.median(values[False])
        # Neighbouring runs share the machine's load of the moment: their ratios are less noisy.
        per_run = statistics.median(g / p for g, p in zip(values[True], values[False], strict=True))
        return f"{of_medians:.3f}x (median of per-run ratios {per_run:.3f}x)"

    print(
        f"\nGGUF {gguf.name}, {args.runs} runs each, alternating, max_tokens {args.max_tokens}, greedy, "
        "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    extra = first_structured - statistics.median(ttfts[True])
    print(
        f"first json_schema request after the load: TTFT {first_structured * 1000:.0f} ms, "
        f"{extra * 1000:.0f} ms more than the median json_schema TTFT"
    )
    print(
        f"in process: vocabulary view {view * 1000:.0f} ms (once per loaded model); grammar per "
        f"request: check {check * 1000:.2f} ms + compile against the vocabulary {build * 1000:.2f} ms"
    )
    for name, values, scale in (
        ("decode tokens/s", rates, 1),
        ("server CPU ms/token", cpus, 1000),
        ("TTFT ms", ttfts, 1000),
    ):
        plain, constrained = (statistics.median(values[g]) * scale for g in (False, True))
        print(
            f"median {name}: plain {plain:.2f}, json_schema {constrained:.2f}; json_schema / plain {ratio(values)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
