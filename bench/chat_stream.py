"""Benchmark: what Sluicegate's streaming path costs per token, against its own baseline.

Run from the repository root (venv active): `python bench/chat_stream.py`

One run streams scripted replies of --words words with no pacing (token_delay_ms 0; the
scripted engine still yields to the event loop after every delta, as a real engine does) and
measures:

  (a) baseline   the scripted engine's raw events consumed directly, in-process
  (b) pipeline   the same request through the path a route takes, minus HTTP, in-process:
                   chat       model admission, deadlines, segmentation, Chat Completions
                              encoding to SSE bytes
                   responses  the same up to segmentation, then a response run: the
                              accumulator, the Responses encoder, the replayable frame log
                              read by a follower, and the SQLite store at the end
  (c) HTTP       a real `sluicegate serve` process on loopback, streamed by httpx clients at
                 concurrency 1 and 16: POST /v1/chat/completions and POST /v1/responses with
                 "stream": true; tokens are the text deltas the clients receive

It prints tokens/s, µs per token, ratios against (a) and (b), the server's and the client's
CPU time per token over HTTP, time to first token (request sent → first text delta received)
p50/p99, and each in-process path built up one stage at a time. Absolute
numbers depend on the machine; compare the ratios within one run.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from sluicegate.conversation.messages import items_to_messages
from sluicegate.conversation.record import stored_turn
from sluicegate.conversation.resolve import Resolved
from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import TextDelta
from sluicegate.core.frames import Frame
from sluicegate.core.pipeline import StreamLimits, canonical_events, stream_deadline
from sluicegate.core.request import ChatRequest, Message
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.dialects.responses.encoder import ResponsesEncoder, ResponseState
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.engines.models import Model
from sluicegate.engines.scripted import ScriptedEngine, parse_script
from sluicegate.store.sqlite import SQLiteStore
from sluicegate.transport.sse import frames_bytes
from sluicegate.turn.pipeline import TurnPipeline

MODEL = "bench"
PROMPT = "Tell me a long story."


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    path: str
    body: bytes
    mark: bytes  # once in every text delta frame, nowhere else


CHAT = Dialect(
    "chat",
    "/v1/chat/completions",
    orjson.dumps(
        {
            "model": MODEL,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": PROMPT}],
        }
    ),
    b'"delta":{"content":"',
)
RESPONSES = Dialect(
    "responses",
    "/v1/responses",
    orjson.dumps({"model": MODEL, "stream": True, "input": PROMPT}),
    b'"type":"response.output_text.delta"',
)
DIALECTS = {d.name: d for d in (CHAT, RESPONSES)}
TITLES = {"chat": "Chat Completions", "responses": "Responses"}


def reply_text(words: int) -> str:
    vocab = ["sluice", "gate", "water", "stream", "token", "river", "lock", "flow", "canal", "weir"]
    return " ".join(vocab[i % len(vocab)] for i in range(words))


def script(words: int) -> dict[str, object]:
    return {"token_delay_ms": 0, "first_token_delay_ms": 0, "replies": [{"content": reply_text(words)}]}


def request() -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[Message(role="user", content=PROMPT)])


# --- (a) and (b): in-process --------------------------------------------------------------


async def run_baseline(engine: ScriptedEngine, repeats: int) -> tuple[int, float]:
    tokens = 0
    started = time.perf_counter()
    for _ in range(repeats):
        async for event in engine.generate(request()):
            if type(event) is TextDelta:
                tokens += 1
    return tokens, time.perf_counter() - started


async def run_chat_pipeline(model: Model, repeats: int) -> tuple[int, float]:
    """What the turn runner does for a Chat Completions stream, up to the bytes the transport writes."""
    limits = StreamLimits()  # the default deadline and idle timeout are on: their cost is part of the path
    tokens = 0
    started = time.perf_counter()
    for i in range(repeats):
        generation = model.open(request())
        encoder = ChatCompletionsEncoder(
            f"chatcmpl-bench{i}", int(time.time()), MODEL, include_usage=True, logprobs=False
        )
        pipeline = TurnPipeline(generation.events, encoder, Accumulator(), deadline=stream_deadline(limits))
        async for frames in pipeline.frames():
            tokens += frames_bytes(frames).count(CHAT.mark)
    return tokens, time.perf_counter() - started


async def run_responses_pipeline(model: Model, store: SQLiteStore, repeats: int) -> tuple[int, float]:
    """What the turn runner does for a stored Responses stream (the pipeline, the record
    written before `response.completed`), up to the bytes the transport writes."""
    limits = StreamLimits()
    tokens = 0
    started = time.perf_counter()
    for i in range(repeats):
        req = parse_responses_request(orjson.loads(RESPONSES.body))
        resolved = Resolved(input_items=req.input_items, history=list(req.input_items))
        chat = ChatRequest(model=MODEL, messages=items_to_messages(resolved.history, None))
        generation = model.open(chat)
        accumulator = Accumulator()
        encoder = ResponsesEncoder(ResponseState(f"resp_bench{i}", req), accumulator)

        async def persist(
            reason: str | None,
            final: list[Frame],
            encoder: ResponsesEncoder = encoder,
            resolved: Resolved = resolved,
        ) -> None:
            response = encoder.response_object()
            assert response is not None
            await store.put(stored_turn(response, resolved, 3600))

        pipeline = TurnPipeline(
            generation.events, encoder, accumulator, persist, deadline=stream_deadline(limits)
        )
        async for frames in pipeline.frames():
            tokens += frames_bytes(frames).count(RESPONSES.mark)
    return tokens, time.perf_counter() - started


def median_rate(rounds: list[tuple[int, float]]) -> float:
    return statistics.median(tokens / seconds for tokens, seconds in rounds)


async def drain(events: AsyncIterator[object]) -> None:
    async for _event in events:
        pass


async def encode_responses(model: Model) -> None:
    """Canonical events fed to the accumulator and the Responses encoder, in one task."""
    req = parse_responses_request(orjson.loads(RESPONSES.body))
    accumulator = Accumulator()
    encoder = ResponsesEncoder(ResponseState("resp_bench", req), accumulator)
    async for event in canonical_events(model.open(request()).events, StreamLimits()):
        accumulator.feed(event)
        encoder.encode(event)


async def stage_costs(
    engine: ScriptedEngine,
    model: Model,
    store: SQLiteStore,
    args: argparse.Namespace,
    dialects: list[Dialect],
) -> dict[str, list[tuple[str, float]]]:
    """µs per token of each in-process path built up one stage at a time, (a) to (b)."""
    no_limits = StreamLimits(request_timeout_seconds=None, idle_timeout_seconds=None)

    def encoder() -> ChatCompletionsEncoder:
        return ChatCompletionsEncoder("chatcmpl-bench", 0, MODEL, include_usage=True, logprobs=False)

    Stages = list[tuple[str, Callable[[], Awaitable[object]]]]
    chat: Stages = [
        ("engine alone (a)", lambda: drain(engine.generate(request()))),
        ("+ model admission (slots, metrics)", lambda: drain(model.open(request()).events)),
        (
            "+ segmentation into items",
            lambda: drain(canonical_events(model.open(request()).events, no_limits)),
        ),
        (
            "+ Chat Completions encoding",
            lambda: drain(TurnPipeline(model.open(request()).events, encoder(), Accumulator()).frames()),
        ),
        (
            "+ request deadline and idle timeout (b)",
            lambda: drain(
                TurnPipeline(
                    model.open(request()).events,
                    encoder(),
                    Accumulator(),
                    deadline=stream_deadline(StreamLimits()),
                ).frames()
            ),
        ),
    ]
    responses: Stages = [
        ("engine alone (a)", lambda: drain(engine.generate(request()))),
        (
            "+ admission, deadlines, segmentation",
            lambda: drain(canonical_events(model.open(request()).events, StreamLimits())),
        ),
        ("+ accumulator and Responses encoding", lambda: encode_responses(model)),
        (
            "+ turn pipeline: frames, record stored before the end (b)",
            lambda: run_responses_pipeline(model, store, 1),
        ),
    ]
    costs: dict[str, list[tuple[str, float]]] = {}
    for name, stages in (("chat", chat), ("responses", responses)):
        if name not in {d.name for d in dialects}:
            continue
        costs[name] = []
        for label, make in stages:
            rounds = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                for _ in range(args.repeats):
                    await make()
                rounds.append((time.perf_counter() - started) * 1e6 / (args.repeats * args.words))
            costs[name].append((label, statistics.median(rounds)))
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
def server(folder: Path, words: int) -> Iterator[tuple[str, int]]:
    (folder / "bench.json").write_bytes(orjson.dumps(script(words)))
    (folder / "bench.toml").write_text(
        f'[server]\ndata_dir = "{folder / "data"}"\n\n'  # the Responses store lives here, not in ~
        f'[[models]]\nid = "{MODEL}"\nengine = "scripted"\nscript = "bench.json"\nmax_concurrency = 64\n'
    )
    port = free_port()
    cmd = [sys.executable, "-m", "sluicegate", "serve", "--config", str(folder / "bench.toml")]
    cmd += ["--port", str(port), "--log-level", "warning"]
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


async def one_stream(
    client: httpx.AsyncClient, base: str, dialect: Dialect, expected: int
) -> tuple[int, float]:
    """Stream one reply; return (text deltas received, seconds to the first one)."""
    tokens = 0
    ttft = 0.0
    tail = b""
    keep = len(dialect.mark) - 1  # a mark split across two reads is still counted once
    headers = {"content-type": "application/json"}
    started = time.perf_counter()
    async with client.stream("POST", base + dialect.path, content=dialect.body, headers=headers) as r:
        r.raise_for_status()
        async for chunk in r.aiter_raw():
            data = tail + chunk
            found = data.count(dialect.mark)
            if found and not tokens:
                ttft = time.perf_counter() - started
            tokens += found
            tail = data[-keep:]
    if tokens != expected:
        raise SystemExit(f"{dialect.name}: expected {expected} text deltas per stream, counted {tokens}")
    return tokens, ttft


@dataclass
class Http:
    tps: float
    server_cpu_us: float | None
    client_cpu_us: float
    ttfts: list[float]


async def run_http(base: str, pid: int, dialect: Dialect, concurrency: int, streams: int, words: int) -> Http:
    """Aggregate tokens/s over `streams` streams, `concurrency` at a time, the server's and the
    client's CPU µs per token, and every stream's TTFT."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        # Warm up: open every connection, load the model, pay first-call costs.
        await asyncio.gather(*(one_stream(client, base, dialect, words) for _ in range(concurrency)))
        todo = iter(range(streams))
        ttfts: list[float] = []
        tokens = 0

        async def worker() -> None:
            nonlocal tokens
            for _ in todo:
                got, ttft = await one_stream(client, base, dialect, words)
                tokens += got
                ttfts.append(ttft)

        cpu_before, client_before = cpu_seconds(pid), time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu_after, client_cpu = cpu_seconds(pid), time.process_time() - client_before
        cpu_us = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) * 1e6 / tokens
        return Http(tokens / elapsed, cpu_us, client_cpu * 1e6 / tokens, ttfts)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- the run, and the report -----------------------------------------------------------------


@dataclass
class Result:
    a: float = 0.0  # tokens/s
    b: dict[str, float] = field(default_factory=dict)  # by dialect
    c: dict[tuple[str, int], Http] = field(default_factory=dict)  # by (dialect, concurrency)
    stages: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # by dialect


async def measure(args: argparse.Namespace, dialects: list[Dialect]) -> Result:
    result = Result()
    engine = ScriptedEngine(MODEL, parse_script(script(args.words), "bench"))
    model = Model(engine, max_concurrency=64, max_queue=256)
    await model.load()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite3")
        pipelines: dict[str, Callable[[int], Awaitable[tuple[int, float]]]] = {
            "chat": lambda n: run_chat_pipeline(model, n),
            "responses": lambda n: run_responses_pipeline(model, store, n),
        }
        await run_baseline(engine, 2)  # warm up
        for d in dialects:
            await pipelines[d.name](2)
        base_rounds: list[tuple[int, float]] = []
        pipe_rounds: dict[str, list[tuple[int, float]]] = {d.name: [] for d in dialects}
        for _ in range(args.rounds):  # interleaved, so drift hits every path alike
            base_rounds.append(await run_baseline(engine, args.repeats))
            for d in dialects:
                pipe_rounds[d.name].append(await pipelines[d.name](args.repeats))
        result.stages = await stage_costs(engine, model, store, args, dialects)
        await store.aclose()
    result.a = median_rate(base_rounds)
    result.b = {name: median_rate(rounds) for name, rounds in pipe_rounds.items()}
    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp), args.words) as (base, pid):
        for d in dialects:
            for c, streams in ((1, args.streams_c1), (16, args.streams_c16)):
                result.c[d.name, c] = await run_http(base, pid, d, c, streams, args.words)
    return result


def report(r: Result) -> None:
    def us(tps: float) -> float:
        return 1e6 / tps

    print(f"\n  {'path':<42}{'tokens/s':>11}{'µs/token':>10}{'vs (a)':>8}{'vs (b)':>8}{'server CPU':>12}")
    print(f"  {'(a) engine events, in-process':<42}{r.a:>11,.0f}{us(r.a):>10.2f}{1:>8.3f}")
    for name, b in r.b.items():
        title = TITLES[name]
        print(f"  {f'(b) {title} pipeline, in-process':<42}{b:>11,.0f}{us(b):>10.2f}{b / r.a:>8.3f}{1:>8.3f}")
        for (dialect, c), h in r.c.items():
            if dialect != name:
                continue
            cpu = "" if h.server_cpu_us is None else f"{h.server_cpu_us:>7.2f} µs"
            label = f"(c) {title} HTTP, concurrency {c}"
            print(
                f"  {label:<42}{h.tps:>11,.0f}{us(h.tps):>10.2f}{h.tps / r.a:>8.3f}{h.tps / b:>8.3f}{cpu:>12}"
            )
    print()
    for name, b in r.b.items():
        print(f"  {TITLES[name]}: (b) adds {us(b) - us(r.a):.2f} µs/token to (a)")
    for (name, c), h in r.c.items():
        print(
            f"  {TITLES[name]} HTTP, concurrency {c:>2}: adds {us(h.tps) - us(r.b[name]):.2f} µs/token to (b); "
            f"client CPU {h.client_cpu_us:.2f} µs/token; TTFT ({len(h.ttfts)} streams) "
            f"p50 {percentile(h.ttfts, 50) * 1000:.2f} ms, p99 {percentile(h.ttfts, 99) * 1000:.2f} ms"
        )
    for name, stages in r.stages.items():
        print(
            f"\n  in-process {TITLES[name]} path built up stage by stage (µs/token, cumulative, +marginal):"
        )
        previous = 0.0
        for label, cost in stages:
            print(f"    {label:<48}{cost:>7.2f}{cost - previous:>+8.2f}")
            previous = cost


async def amain(args: argparse.Namespace) -> None:
    dialects = [DIALECTS[name] for name in args.dialect]
    print(f"Sluicegate streaming bench: {args.words}-word replies, one delta per word, no pacing")
    print(f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs")
    started = time.perf_counter()
    report(await measure(args, dialects))
    print(f"\n({time.perf_counter() - started:.0f}s)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--words", type=int, default=2000, help="words (= deltas) per reply")
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds; the median is reported")
    parser.add_argument("--repeats", type=int, default=20, help="replies per in-process round")
    parser.add_argument("--streams-c1", type=int, default=50, help="HTTP streams at concurrency 1")
    parser.add_argument("--streams-c16", type=int, default=160, help="HTTP streams at concurrency 16")
    parser.add_argument(
        "--dialect",
        action="append",
        choices=sorted(DIALECTS),
        help="measure only this dialect (repeatable; default: chat and responses)",
    )
    args = parser.parse_args()
    args.dialect = args.dialect or ["chat", "responses"]
    asyncio.run(amain(args))


if __name__ == "__main__":
    main()
