"""Benchmark: the llamacpp engine's host-side work per token, beside llama_decode (issue 48 part 3).

Run from the repository root (venv active):

    python bench/host_side.py [--users 1 4] [--tokens 128] [--gguf PATH] [--sampling default]
        [--llama-chain] [--sampler-cost]

One engine in this process (no server around it), Gemma 3 270M by default (the GGUF the tests
assemble), `parallel` = the most users asked for, greedy (`--sampling default`: llama.cpp's
default chain, temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, seeded; `--llama-chain`: drawn
by llama.cpp's `llama_sampler_sample` over the whole vocabulary instead of the chain on numpy's
top k, top_k_chain.py),
every reply run to `--tokens` (its stops ignored is not possible for a chat model, so the
counts are the usage's). `llama_decode`
is wrapped: on the worker thread, the CPU time (`time.thread_time`, which a loaded machine's
waiting does not inflate) spent inside each call and between calls. Host-side time is what the
worker's thread spends outside `llama_decode` (batch filling, sampling, detokenizing, parsing,
handing events over), per generated token; the CPU time inside it is the thread's share of the
graph (llama.cpp's other threads are not counted). Also the counts per token of the worker's
ctypes calls into llama.cpp, which do not depend on the load at all.

`--sampler-cost`: one draw of the default chain alone, on the logits after the prompt (a second
copy of the model, in this thread): thread CPU time of `llama_sampler_sample` and of the engine's
top-k chain, min and median of many repetitions (the min hardly moves with the load).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import threading
import time
from pathlib import Path
from typing import Any

import llama_cpp

from batching import gemma_gguf
from sluicegate.core.events import UsageReport
from sluicegate.core.request import ChatRequest, Message, SamplingParams
from sluicegate.engines.llamacpp import runtime as runtime_module
from sluicegate.engines.llamacpp.engine import LlamaCppEngine

PROMPT = "Write a long story about a lighthouse keeper and the sea, with every detail of the weather."


class Meter:
    """Thread CPU inside and between `llama_decode` calls, and ctypes calls, on one thread."""

    def __init__(self) -> None:
        self.inside = self.outside = 0.0
        self.decodes = 0
        self.calls: collections.Counter[str] = collections.Counter()
        self.thread: int | None = None
        self._left: float | None = None
        self.on = False

    def wrap(self) -> None:
        decode = llama_cpp.llama_decode

        def timed(ctx: Any, batch: Any) -> int:
            now = time.thread_time()
            if self.on and self._left is not None and threading.get_ident() == self.thread:
                self.outside += now - self._left
            status: int = decode(ctx, batch)
            after = time.thread_time()
            if self.on:
                self.thread = threading.get_ident()
                self.inside += after - now
                self.decodes += 1
            self._left = after
            return status

        llama_cpp.llama_decode = timed
        for name in (
            "llama_get_logits_ith",
            "llama_sampler_sample",
            "llama_token_to_piece",
            "llama_vocab_is_eog",
        ):
            self._count(name)

    def _count(self, name: str) -> None:
        function = getattr(llama_cpp, name)

        def counted(*args: Any) -> Any:
            if self.on:
                self.calls[name] += 1
            return function(*args)

        setattr(llama_cpp, name, counted)


class Spans:
    """The worker thread's CPU (`time.thread_time`) inside a few of the step's parts while on:
    the step outside `llama_decode`, each row's `Sequence.accept` (sampling, detokenizing, the
    stop scan, the hand-over) and the draw in it, and `_flush` (a wake-up of the event loop)."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.count: collections.Counter[str] = collections.Counter()
        self.on = False

    def wrap(self, owner: Any, name: str, label: str) -> None:
        function = getattr(owner, name)

        def timed(*args: Any) -> Any:
            if not self.on:
                return function(*args)
            now = time.thread_time()
            try:
                return function(*args)
            finally:
                self.seconds[label] += time.thread_time() - now
                self.count[label] += 1

        try:
            setattr(owner, name, timed)
        except TypeError:  # a class mypyc compiled: its methods cannot be replaced
            print(f"  ({label}: compiled, not timed)", flush=True)

    def install(self) -> None:
        from sluicegate.engines.llamacpp.scheduler import BatchScheduler
        from sluicegate.engines.llamacpp.sequence import Sequence

        self.wrap(BatchScheduler, "_step", "step, llama_decode included")
        self.wrap(BatchScheduler, "_flush", "flush (a wake-up)")
        self.wrap(Sequence, "accept", "accept (a row's token)")
        self.wrap(llama_cpp, "llama_sampler_sample", "llama_sampler_sample")

    def report(self, tokens: int, inside: float) -> None:
        seconds = dict(self.seconds)
        step = seconds.pop("step, llama_decode included", 0.0) - inside
        steps = self.count["step, llama_decode included"]
        parts = [f"step outside llama_decode {step / tokens * 1e6:.1f} us ({steps / tokens:.2f} a token)"]
        for label, total in seconds.items():
            parts.append(f"{label} {total / tokens * 1e6:.1f} us ({self.count[label] / tokens:.2f} a token)")
        print("  worker CPU per token: " + "; ".join(parts), flush=True)
        self.seconds.clear()
        self.count.clear()


class Calls:
    """Python and C calls per thread while on (sys.setprofile: counts, which no load moves)."""

    def __init__(self) -> None:
        self.by: collections.Counter[tuple[str, str]] = collections.Counter()
        self.on = False

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if not self.on or event not in ("call", "c_call"):
            return
        where = "loop" if threading.current_thread() is threading.main_thread() else "worker"
        if event == "call":
            code = frame.f_code
            name = f"{Path(code.co_filename).name}:{code.co_qualname}"
        else:
            name = f"C {getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"
        self.by[where, name] += 1

    def install(self) -> None:
        import sys

        sys.setprofile(self._profile)
        threading.setprofile(self._profile)

    def report(self, tokens: int, top: int = 25) -> None:
        for where in ("worker", "loop"):
            rows = [(n, c) for (w, n), c in self.by.items() if w == where]
            total = sum(c for _, c in rows)
            print(f"  {where}: {total / tokens:.1f} calls per token; the most:", flush=True)
            for name, count in sorted(rows, key=lambda r: -r[1])[:top]:
                print(f"    {count / tokens:7.2f}  {name}")


def sampling(kind: str, tokens: int, i: int) -> SamplingParams:
    if kind == "greedy":
        return SamplingParams(max_tokens=tokens, temperature=0)
    return SamplingParams(max_tokens=tokens, seed=1000 + i)  # llama.cpp's default chain


async def run(engine: LlamaCppEngine, users: int, tokens: int, tag: str, kind: str = "greedy") -> int:
    async def one(i: int) -> int:
        request = ChatRequest(
            model="m",
            messages=[Message("user", f"{tag} {i}. {PROMPT}")],
            sampling=sampling(kind, tokens, i),
        )
        engine.check(request)
        count = 0
        async for event in engine.generate(request):
            for e in getattr(event, "events", [event]):
                if isinstance(e, UsageReport):
                    count = e.usage.completion_tokens
        return count

    return sum(await asyncio.gather(*(one(i) for i in range(users))))


def sampler_cost(gguf: Path, threads: int, repeats: int = 400) -> None:
    """Thread CPU of one default-chain draw on Gemma's logits after the prompt: llama.cpp's
    `llama_sampler_sample` (a candidate array of the whole vocabulary) against the top-k chain."""
    import numpy as np

    from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime
    from sluicegate.engines.llamacpp.top_k_chain import TopKChain
    from sluicegate.parsing import PlainText

    runtime_module._init_backend()
    runtime = LlamaRuntime(
        gguf, context_length=512, n_gpu_layers=0, threads=threads, batch_size=64,
        flash_attention=None, on_progress=lambda _p: None,
    )  # fmt: skip
    try:
        default = SamplingParams()
        job = Job(runtime.tokenize(PROMPT), default, 0, PlainText(), lambda _e: None, ("bench", None))
        assert runtime.prefill(job)
        ctx, chain = runtime.context.ctx, runtime._sampler(default, 1)
        fast_chain = runtime._sampler(default, 1)
        fast = TopKChain(fast_chain, 40, runtime.n_vocab)

        def timed(draw: Any) -> tuple[float, float]:
            times = []
            for _ in range(repeats):
                start = time.thread_time_ns()
                draw()
                times.append(time.thread_time_ns() - start)
            times.sort()
            return times[0] / 1e3, times[len(times) // 2] / 1e3

        llama_min, llama_median = timed(lambda: llama_cpp.llama_sampler_sample(chain, ctx, -1))
        fast_min, fast_median = timed(lambda: fast.sample(runtime.logits()))
        argmax_min, argmax_median = timed(runtime.argmax)
        llama_cpp.llama_sampler_free(chain)
        llama_cpp.llama_sampler_free(fast_chain)
        greedy = runtime._sampler(SamplingParams(temperature=0), 1)  # what llama-server runs at 0
        greedy_min, greedy_median = timed(lambda: llama_cpp.llama_sampler_sample(greedy, ctx, -1))
        llama_cpp.llama_sampler_free(greedy)
        print(
            f"one draw, thread CPU (min / median of {repeats}), vocabulary {runtime.n_vocab}: "
            f"llama_sampler_sample {llama_min:.0f} / {llama_median:.0f} us, top-k chain "
            f"{fast_min:.0f} / {fast_median:.0f} us; greedy: llama.cpp's sampler {greedy_min:.0f} / "
            f"{greedy_median:.0f} us, argmax {argmax_min:.0f} / {argmax_median:.0f} us (numpy {np.__version__})",
            flush=True,
        )
    finally:
        runtime.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", type=Path)
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sampling", choices=("greedy", "default"), default="greedy")
    parser.add_argument("--llama-chain", action="store_true", help="llama.cpp draws, not the top-k chain")
    parser.add_argument("--sampler-cost", action="store_true", help="also time one draw alone")
    parser.add_argument("--calls", action="store_true", help="also Python calls per token, by thread")
    parser.add_argument("--spans", action="store_true", help="also the worker's CPU in parts of a step")
    args = parser.parse_args()
    calls, spans = Calls(), Spans()
    if args.llama_chain:
        runtime_module.FAST_CHAIN_VOCAB = 1 << 62  # every vocabulary is small: llama.cpp's chain
    meter = Meter()
    if args.spans:  # under the meter's wrapper: the step's time includes the decode's, taken off
        spans.install()
    meter.wrap()
    gguf = args.gguf or gemma_gguf()
    if args.sampler_cost:
        sampler_cost(gguf, args.threads)
    config = {
        "id": "m", "path": str(gguf), "context_length": 2048, "threads": args.threads,
        "batching": True, "parallel": max(args.users),
    }  # fmt: skip
    engine = LlamaCppEngine.from_config(config, Path("."))
    if args.calls:
        calls.install()  # before the load, which starts the worker's thread
    await engine.load(lambda _p: None)
    try:
        await run(engine, 1, 4, "warm-up")
        for users in args.users:
            meter.inside = meter.outside = 0.0
            meter.decodes, meter._left = 0, None
            meter.calls.clear()
            meter.on = calls.on = spans.on = True
            made = await run(engine, users, args.tokens, f"users {users}", args.sampling)
            meter.on = calls.on = spans.on = False
            per = {name: count / made for name, count in sorted(meter.calls.items())}
            print(
                f"{users} user(s), {args.sampling}: {made} tokens, {meter.decodes} decodes; worker thread CPU per token: "
                f"outside llama_decode {meter.outside / made * 1e6:.0f} us, inside {meter.inside / made * 1e6:.0f} us "
                f"(outside share {meter.outside / (meter.outside + meter.inside):.1%}); calls per token "
                + ", ".join(f"{k} {v:.2f}" for k, v in per.items()),
                flush=True,
            )
            if args.spans:
                spans.report(made, meter.inside)
            if args.calls:
                calls.report(made)
                calls.by.clear()
    finally:
        await engine.unload()


if __name__ == "__main__":
    asyncio.run(main())
