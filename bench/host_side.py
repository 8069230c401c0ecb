"""Benchmark: the llamacpp engine's host-side work per token, beside llama_decode (issue 48 part 3).

Run from the repository root (venv active):

    python bench/host_side.py [--users 1 4] [--tokens 128] [--gguf PATH]

One engine in this process (no server around it), Gemma 3 270M by default (the GGUF the tests
assemble), `parallel` = the most users asked for, greedy, every reply run to `--tokens` (its
stops ignored is not possible for a chat model, so the counts are the usage's). `llama_decode`
is wrapped: on the worker thread, the CPU time (`time.thread_time`, which a loaded machine's
waiting does not inflate) spent inside each call and between calls. Host-side time is what the
worker's thread spends outside `llama_decode` (batch filling, sampling, detokenizing, parsing,
handing events over), per generated token; the CPU time inside it is the thread's share of the
graph (llama.cpp's other threads are not counted). Also the counts per token of the worker's
ctypes calls into llama.cpp, which do not depend on the load at all.
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


async def run(engine: LlamaCppEngine, users: int, tokens: int, tag: str) -> int:
    async def one(i: int) -> int:
        request = ChatRequest(
            model="m",
            messages=[Message("user", f"{tag} {i}. {PROMPT}")],
            sampling=SamplingParams(max_tokens=tokens, temperature=0),
        )
        engine.check(request)
        count = 0
        async for event in engine.generate(request):
            for e in getattr(event, "events", [event]):
                if isinstance(e, UsageReport):
                    count = e.usage.completion_tokens
        return count

    return sum(await asyncio.gather(*(one(i) for i in range(users))))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", type=Path)
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    meter = Meter()
    meter.wrap()
    gguf = args.gguf or gemma_gguf()
    config = {
        "id": "m", "path": str(gguf), "context_length": 2048, "threads": args.threads,
        "batching": True, "parallel": max(args.users),
    }  # fmt: skip
    engine = LlamaCppEngine.from_config(config, Path("."))
    await engine.load(lambda _p: None)
    try:
        await run(engine, 1, 4, "warm-up")
        for users in args.users:
            meter.inside = meter.outside = 0.0
            meter.decodes, meter._left = 0, None
            meter.calls.clear()
            meter.on = True
            made = await run(engine, users, args.tokens, f"users {users}")
            meter.on = False
            per = {name: count / made for name, count in sorted(meter.calls.items())}
            print(
                f"{users} user(s): {made} tokens, {meter.decodes} decodes; worker thread CPU per token: "
                f"outside llama_decode {meter.outside / made * 1e6:.0f} us, inside {meter.inside / made * 1e6:.0f} us "
                f"(outside share {meter.outside / (meter.outside + meter.inside):.1%}); calls per token "
                + ", ".join(f"{k} {v:.2f}" for k, v in per.items()),
                flush=True,
            )
    finally:
        await engine.unload()


if __name__ == "__main__":
    asyncio.run(main())
