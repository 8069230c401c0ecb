"""Benchmark: the cost of the Chat Completions streaming path, per token, against its own baseline.

Run from the repository root (venv active): `python bench/chat_stream.py`

One run measures, with a scripted reply of --words words and no pacing (token_delay_ms 0):

  (a) baseline   the scripted engine's raw events consumed directly, in-process
  (b) pipeline   the same request through the path a route takes, minus HTTP: model admission,
                 deadlines, segmentation, Chat Completions encoding to SSE bytes
  (c) HTTP       a real `sluicegate serve` process on loopback, streamed by httpx clients at
                 concurrency 1 and 16; tokens are the content deltas the clients receive

It does so twice:

  burst     the scripted engine as shipped. With token_delay_ms 0 it never awaits during a
            reply, so a whole reply is produced in one go and leaves in one write.
  yielding  the same engine, but it yields to the event loop after every delta, as an engine
            that awaits a model or an upstream per token does. Every frame is its own write:
            this is the per-token cost a real model sees.

It prints tokens/s, µs per token, ratios (b)/(a) and (c)/(b), and time to first token
(request sent → first content delta received) p50/p99 over HTTP. Absolute numbers depend on
the machine; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from sluicegate.core.events import RawEvent, TextDelta
from sluicegate.core.pipeline import StreamLimits, canonical_events, encoded_frames
from sluicegate.core.request import ChatRequest, Message
from sluicegate.dialects.chat_completions import ChatCompletionsEncoder
from sluicegate.engines.registry import Model
from sluicegate.engines.scripted import ScriptedEngine, parse_script

MODEL = "bench"
PROMPT = "Tell me a long story."
CONTENT_MARK = b'"delta":{"content":"'  # once in every content delta frame, nowhere else


def reply_text(words: int) -> str:
    vocab = ["sluice", "gate", "water", "stream", "token", "river", "lock", "flow", "canal", "weir"]
    return " ".join(vocab[i % len(vocab)] for i in range(words))


def script(words: int) -> dict[str, object]:
    return {"token_delay_ms": 0, "first_token_delay_ms": 0, "replies": [{"content": reply_text(words)}]}


def request() -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[Message(role="user", content=PROMPT)])


_shipped_generate = ScriptedEngine.generate


async def _yielding_generate(self: ScriptedEngine, request: ChatRequest) -> AsyncIterator[RawEvent]:
    async for event in _shipped_generate(self, request):
        yield event
        await asyncio.sleep(0)


def use_yielding_engine(on: bool) -> None:
    """Switch every ScriptedEngine (in this process) between shipped and yield-per-delta."""
    ScriptedEngine.generate = _yielding_generate if on else _shipped_generate  # type: ignore[method-assign]


# --- (a) and (b): in-process --------------------------------------------------------------


async def run_baseline(engine: ScriptedEngine, repeats: int) -> tuple[int, float]:
    tokens = 0
    started = time.perf_counter()
    for _ in range(repeats):
        async for event in engine.generate(request()):
            if type(event) is TextDelta:
                tokens += 1
    return tokens, time.perf_counter() - started


async def run_pipeline(model: Model, repeats: int) -> tuple[int, float]:
    """What `routes/chat_completions.py` does for a stream, up to the bytes handed to the transport."""
    limits = StreamLimits()  # the default deadline and idle timeout are on: their cost is part of the path
    tokens = 0
    started = time.perf_counter()
    for i in range(repeats):
        generation = model.open(request())
        encoder = ChatCompletionsEncoder(
            f"chatcmpl-bench{i}", int(time.time()), MODEL, include_usage=True, logprobs=False
        )
        async for frame in encoded_frames(canonical_events(generation.events, limits), encoder.encode):
            tokens += frame.count(CONTENT_MARK)
    return tokens, time.perf_counter() - started


def median_rate(rounds: list[tuple[int, float]]) -> float:
    return statistics.median(tokens / seconds for tokens, seconds in rounds)


async def stage_costs(
    engine: ScriptedEngine, model: Model, args: argparse.Namespace
) -> list[tuple[str, float]]:
    """µs per token of the in-process path built up one stage at a time, (a) to (b)."""
    no_limits = StreamLimits(request_timeout_seconds=None, idle_timeout_seconds=None)

    def encoder() -> ChatCompletionsEncoder:
        return ChatCompletionsEncoder("chatcmpl-bench", 0, MODEL, include_usage=True, logprobs=False)

    stages: list[tuple[str, Callable[[], AsyncIterator[object]]]] = [
        ("engine alone (a)", lambda: engine.generate(request())),
        ("+ model admission (slots, metrics)", lambda: model.open(request()).events),
        ("+ segmentation into items", lambda: canonical_events(model.open(request()).events, no_limits)),
        (
            "+ Chat Completions encoding",
            lambda: encoded_frames(
                canonical_events(model.open(request()).events, no_limits), encoder().encode
            ),
        ),
        (
            "+ request deadline and idle timeout (b)",
            lambda: encoded_frames(
                canonical_events(model.open(request()).events, StreamLimits()), encoder().encode
            ),
        ),
    ]
    costs = []
    for label, make in stages:
        rounds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for _ in range(args.repeats):
                async for _event in make():
                    pass
            rounds.append((time.perf_counter() - started) * 1e6 / (args.repeats * args.words))
        costs.append((label, statistics.median(rounds)))
    return costs


# --- (c): over HTTP -------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(folder: Path, words: int, yielding: bool) -> Iterator[tuple[str, int]]:
    (folder / "bench.json").write_bytes(orjson.dumps(script(words)))
    (folder / "bench.toml").write_text(
        f'[[models]]\nid = "{MODEL}"\nengine = "scripted"\nscript = "bench.json"\nmax_concurrency = 64\n'
    )
    port = free_port()
    serve = ["serve", "--config", str(folder / "bench.toml"), "--port", str(port), "--log-level", "warning"]
    # The yielding variant runs this file as the server: it patches the engine, then `sluicegate serve`.
    cmd = (
        [sys.executable, __file__, "--serve-yielding", *serve]
        if yielding
        else [sys.executable, "-m", "sluicegate", *serve]
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("server did not start within 30s")
            time.sleep(0.1)
        yield base, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


BODY = orjson.dumps(
    {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": PROMPT}],
    }
)


async def one_stream(client: httpx.AsyncClient, url: str, expected: int) -> tuple[int, float]:
    """Stream one completion; return (content deltas received, seconds to the first one)."""
    tokens = 0
    ttft = 0.0
    tail = b""
    keep = len(CONTENT_MARK) - 1  # a mark split across two reads is still counted once
    started = time.perf_counter()
    async with client.stream("POST", url, content=BODY, headers={"content-type": "application/json"}) as r:
        r.raise_for_status()
        async for chunk in r.aiter_raw():
            data = tail + chunk
            found = data.count(CONTENT_MARK)
            if found and not tokens:
                ttft = time.perf_counter() - started
            tokens += found
            tail = data[-keep:]
    if tokens != expected:
        raise SystemExit(f"expected {expected} content deltas per stream, counted {tokens}")
    return tokens, ttft


async def run_http(
    base: str, pid: int, concurrency: int, streams: int, words: int
) -> tuple[float, float | None, float, list[float]]:
    """Aggregate tokens/s over `streams` streams, `concurrency` at a time, the server's and the
    client's CPU µs per token, and every stream's TTFT."""
    url = base + "/v1/chat/completions"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        # Warm up: open every connection, load the model, pay first-call costs.
        await asyncio.gather(*(one_stream(client, url, words) for _ in range(concurrency)))
        todo = iter(range(streams))
        ttfts: list[float] = []
        tokens = 0

        async def worker() -> None:
            nonlocal tokens
            for _ in todo:
                got, ttft = await one_stream(client, url, words)
                tokens += got
                ttfts.append(ttft)

        cpu_before, client_before = cpu_seconds(pid), time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu_after, client_cpu = cpu_seconds(pid), time.process_time() - client_before
        cpu_us = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) * 1e6 / tokens
        return tokens / elapsed, cpu_us, client_cpu * 1e6 / tokens, ttfts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- one scenario, and the report ------------------------------------------------------------


@dataclass
class Result:
    name: str
    a: float = 0.0  # tokens/s
    b: float = 0.0
    c: dict[int, float] = field(default_factory=dict)
    server_cpu_us: dict[int, float | None] = field(default_factory=dict)
    client_cpu_us: dict[int, float] = field(default_factory=dict)
    ttft: dict[int, list[float]] = field(default_factory=dict)
    stages: list[tuple[str, float]] = field(default_factory=list)


async def scenario(name: str, yielding: bool, args: argparse.Namespace) -> Result:
    use_yielding_engine(yielding)
    result = Result(name)
    engine = ScriptedEngine(MODEL, parse_script(script(args.words), "bench"))
    model = Model(engine, max_concurrency=64, max_queue=256)
    await model.load()
    await run_baseline(engine, 2)  # warm up
    await run_pipeline(model, 2)
    base_rounds, pipe_rounds = [], []
    for _ in range(args.rounds):  # interleaved, so drift hits both alike
        base_rounds.append(await run_baseline(engine, args.repeats))
        pipe_rounds.append(await run_pipeline(model, args.repeats))
    result.a, result.b = median_rate(base_rounds), median_rate(pipe_rounds)
    if not yielding:
        result.stages = await stage_costs(engine, model, args)
    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp), args.words, yielding) as (base, pid):
        for c, streams in ((1, args.streams_c1), (16, args.streams_c16)):
            result.c[c], result.server_cpu_us[c], result.client_cpu_us[c], result.ttft[c] = await run_http(
                base, pid, c, streams, args.words
            )
    use_yielding_engine(False)
    return result


def report(r: Result) -> None:
    def us(tps: float) -> float:
        return 1e6 / tps

    print(f"\n[{r.name}]")
    print(f"  {'path':<32}{'tokens/s':>12}{'µs/token':>10}{'vs (a)':>9}{'vs (b)':>9}")
    rows = [("(a) engine events, in-process", r.a), ("(b) full pipeline, in-process", r.b)]
    rows += [(f"(c) HTTP, concurrency {c}", tps) for c, tps in r.c.items()]
    for label, tps in rows:
        print(f"  {label:<32}{tps:>12,.0f}{us(tps):>10.2f}{tps / r.a:>9.3f}{tps / r.b:>9.3f}")
    print(f"  (b)/(a) = {r.b / r.a:.3f}: the pipeline adds {us(r.b) - us(r.a):.2f} µs/token")
    for c, tps in r.c.items():
        cpu = r.server_cpu_us[c]
        cpu_text = "" if cpu is None else f"; CPU µs/token: server {cpu:.2f}"
        cpu_text += f", client {r.client_cpu_us[c]:.2f}"
        print(
            f"  (c)/(b) = {tps / r.b:.3f} at concurrency {c:>2}: HTTP adds {us(tps) - us(r.b):.2f} µs/token"
            + cpu_text
        )
    if r.stages:
        print("  in-process path built up stage by stage (µs/token, cumulative, +marginal):")
        previous = 0.0
        for label, cost in r.stages:
            print(f"    {label:<42}{cost:>7.2f}{cost - previous:>+8.2f}")
            previous = cost
    for c, ttfts in r.ttft.items():
        print(
            f"  TTFT at concurrency {c:>2} ({len(ttfts)} streams): "
            f"p50 {percentile(ttfts, 50) * 1000:.2f} ms, p99 {percentile(ttfts, 99) * 1000:.2f} ms"
        )


async def amain(args: argparse.Namespace) -> None:
    print(f"Sluicegate Chat Completions streaming bench: {args.words}-word replies, one delta per word")
    print(f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs")
    started = time.perf_counter()
    for name, yielding in (("burst: engine as shipped", False), ("yielding: engine awaits per delta", True)):
        report(await scenario(name, yielding, args))
    print(f"\n({time.perf_counter() - started:.0f}s)")


def main() -> None:
    if sys.argv[1:2] == ["--serve-yielding"]:
        from sluicegate.cli import main as cli_main

        use_yielding_engine(True)
        raise SystemExit(cli_main(sys.argv[2:]))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--words", type=int, default=2000, help="words (= deltas) per reply")
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds; the median is reported")
    parser.add_argument("--repeats", type=int, default=20, help="replies per in-process round")
    parser.add_argument("--streams-c1", type=int, default=50, help="HTTP streams at concurrency 1")
    parser.add_argument("--streams-c16", type=int, default=160, help="HTTP streams at concurrency 16")
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()
