"""Continuous batching: N sequences of one real llama.cpp context, scheduled together.

Real llama.cpp, the tiny demo GGUF (random weights: end of turn is never sampled, so every
reply runs to `max_tokens`), the engine as the server drives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_events import engine_events
from sluicegate.core.errors import EngineFailure
from sluicegate.core.events import Finished, PromptProgress, RawBatch, RawEvent, TextDelta, Usage, UsageReport
from sluicegate.core.request import ChatRequest, Message, RequestOptions, SamplingParams
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.engine import LlamaCppEngine

PROMPTS = [
    "What is the weather in Paris today?",
    "Tell me a story about a dragon and a knight.",
    "List three colours.",
    "How do tides work? Explain in detail, please, with examples from the coast.",
]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("batching") / "tiny.gguf", ends_replies=False)


def _engine(gguf: Path, **extra: Any) -> LlamaCppEngine:
    table = {"id": "b", "engine": "llamacpp", "path": str(gguf), "batch_size": 32, "context_length": 512}
    return LlamaCppEngine.from_config({**table, **extra}, Path("."))


def _request(prompt: str, **sampling: Any) -> ChatRequest:
    sampling.setdefault("max_tokens", 24)
    sampling.setdefault("temperature", 0.0)
    return ChatRequest(model="b", messages=[Message("user", prompt)], sampling=SamplingParams(**sampling))


class Reply:
    def __init__(self) -> None:
        self.text = ""
        self.finish: Any = None
        self.usage = Usage()
        self.progress: list[float] = []


async def _run(engine: LlamaCppEngine, request: ChatRequest) -> Reply:
    engine.check(request)
    reply = Reply()
    async for event in engine_events(engine, request):
        _note(reply, event)
    return reply


def _note(reply: Reply, event: RawEvent) -> None:
    if isinstance(event, TextDelta):
        reply.text += event.text
    elif isinstance(event, Finished):
        reply.finish = event.reason
    elif isinstance(event, UsageReport):
        reply.usage = event.usage
    elif isinstance(event, PromptProgress):
        reply.progress.append(event.progress)


@pytest.fixture
def loaded(gguf: Path) -> Iterator[Any]:
    """(engine factory) -> loaded engines, closed at the end."""
    loop = asyncio.new_event_loop()
    engines: list[LlamaCppEngine] = []

    def make(**extra: Any) -> LlamaCppEngine:
        engine = _engine(gguf, **extra)
        loop.run_until_complete(engine.load(lambda _: None))
        engines.append(engine)
        return engine

    make.loop = loop  # type: ignore[attr-defined]
    yield make
    for engine in engines:
        loop.run_until_complete(engine.aclose())
    loop.close()


def test_settings_and_concurrency(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=3)
    assert (engine.sequences, engine.parallel, engine.default_concurrency()) == (3, 1, 3)
    runtime = engine._runtime
    assert runtime is not None and runtime.n_ctx == 512  # context_length stays per sequence
    plain = _engine(engine.settings.path, batching=False, parallel=3)
    assert (plain.sequences, plain.parallel, plain.default_concurrency()) == (1, 3, 1)


def test_concurrent_replies_equal_each_alone(loaded: Any) -> None:
    """Four distinct prompts (each with its own seed) decoded together get what each gets alone."""
    engine = loaded(batching=True, parallel=4)
    loop = loaded.loop
    alone = [
        loop.run_until_complete(_run(engine, _request(p, temperature=1.0, seed=i)))
        for i, p in enumerate(PROMPTS)
    ]

    async def together() -> list[Reply]:
        runs = (_run(engine, _request(p, temperature=1.0, seed=i)) for i, p in enumerate(PROMPTS))
        return list(await asyncio.gather(*runs))

    batched = loop.run_until_complete(together())
    assert all(r.text and r.finish.value == "length" for r in alone)
    assert len({r.text for r in alone}) == len(PROMPTS)  # distinct replies: cross-talk would show
    assert [r.text for r in batched] == [r.text for r in alone]
    assert engine._scheduler is not None


def test_seeded_reply_alone_and_beside_others(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=4)
    loop = loaded.loop
    seeded = _request(PROMPTS[1], temperature=1.0, seed=42, max_tokens=32)
    alone = loop.run_until_complete(_run(engine, seeded))

    async def beside() -> list[Reply]:
        others = [_run(engine, _request(p, temperature=1.0, max_tokens=40)) for p in PROMPTS]
        return list(
            await asyncio.gather(
                _run(engine, _request(PROMPTS[1], temperature=1.0, seed=42, max_tokens=32)), *others
            )
        )

    replies = loop.run_until_complete(beside())
    assert replies[0].text == alone.text != ""


async def _handovers(engine: LlamaCppEngine, request: ChatRequest) -> list[list[RawEvent]]:
    """What each hand-over from the worker thread carried (a RawBatch is one hand-over)."""
    engine.check(request)
    return [
        received.events if isinstance(received, RawBatch) else [received]
        async for received in engine.generate(request)
    ]


def _text(handovers: list[list[RawEvent]]) -> str:
    return "".join(e.text for events in handovers for e in events if isinstance(e, TextDelta))


def test_stream_interval_hands_tokens_over_together(loaded: Any) -> None:
    """With `stream_interval_ms`, a running stream's tokens cross to the event loop together
    (here: an interval longer than the test), its first token and its end at once; the reply
    is the one every-token hand-over gives."""
    every = loaded(batching=True, parallel=2, stream_interval_ms=0)
    together = loaded(batching=True, parallel=2, stream_interval_ms=60_000, context_length=4096)
    loop = loaded.loop
    seeded = _request(PROMPTS[1], temperature=1.0, seed=7, max_tokens=48)
    each = loop.run_until_complete(_handovers(every, seeded))
    grouped = loop.run_until_complete(_handovers(together, seeded))

    def with_text(handovers: list[list[RawEvent]]) -> list[list[RawEvent]]:
        return [events for events in handovers if any(isinstance(e, TextDelta) for e in events)]

    assert _text(grouped) == _text(each) != ""
    assert len(with_text(each)) > 2  # one hand-over per step
    # The first token at once, everything after it with the end: two (one if the loop stalled).
    assert len(with_text(grouped)) <= 2
    assert isinstance(grouped[-1][-1], Finished)
    usage = [e for events in grouped for e in events if isinstance(e, UsageReport)][-1].usage
    assert usage.completion_tokens == 48

    scheduler = together._scheduler
    assert scheduler is not None

    def generating() -> bool:
        return any(slot.sequence is not None for slot in scheduler.slots)

    async def beside_a_long_one() -> tuple[Reply, bool, bool]:
        long = _request(PROMPTS[0], max_tokens=3000)
        together.check(long)
        stream = engine_events(together, long)
        try:
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
            first_while_running = generating()
            short = await _run(together, _request(PROMPTS[2], max_tokens=4))
            return short, first_while_running, generating()
        finally:
            await stream.aclose()

    # A first token and a short request's end are not held back for the interval by a stream
    # still running: both arrive while the long one still has thousands of tokens to go.
    short, first_while_running, end_while_running = loop.run_until_complete(beside_a_long_one())
    assert short.finish.value == "length"
    assert first_while_running and end_while_running


@pytest.mark.parametrize(
    ("streams", "step_ms", "wakes_per_step"),
    [
        (2, 40, 0.5),  # steps longer than the 30 ms interval: two steps' tokens per wake-up
        (2, 100, 1.0),  # but never holding a token past 3 intervals: every step
        (1, 40, 1.0),  # one stream's wake-up is cheap: at once, as before
    ],
)
def test_several_streams_hand_over_two_steps_at_once(
    loaded: Any, monkeypatch: pytest.MonkeyPatch, streams: int, step_ms: int, wakes_per_step: float
) -> None:
    """With several streams, a wake-up costs the event loop a step and a write per stream: when
    a step takes longer than `stream_interval_ms`, a wake-up carries two steps' tokens, unless
    the first of them would then wait more than 3 intervals. A clock that only moves in
    `llama_decode` (by `step_ms`) makes the decisions the same on any machine."""
    from sluicegate.engines.llamacpp import scheduler as module

    engine = loaded(batching=True, parallel=2, stream_interval_ms=30)
    scheduler = engine._scheduler
    assert scheduler is not None
    now = [1000.0]
    flushes = [0]
    decode, flush = module.llama_cpp.llama_decode, scheduler.wakeups.flush
    # Per generation-only step (every live sequence past its prompt): whether the loop was
    # woken since the step before.
    woken: list[bool] = []
    seen = [0]

    def counted_flush() -> None:
        flushes[0] += 1
        flush()

    def timed_decode(ctx: Any, batch: Any) -> int:
        live = [slot.sequence for slot in scheduler._live if slot.sequence is not None]
        if len(live) == streams and not any(s.prefilling for s in live) and batch.n_tokens == streams:
            woken.append(flushes[0] > seen[0])
        seen[0] = flushes[0]
        status = int(decode(ctx, batch))
        now[0] += step_ms / 1000
        return status

    monkeypatch.setattr(module, "time", type("Clock", (), {"monotonic": staticmethod(lambda: now[0])}))
    monkeypatch.setattr(scheduler.wakeups, "flush", counted_flush)
    monkeypatch.setattr(module.llama_cpp, "llama_decode", timed_decode)

    async def together() -> list[Reply]:
        # The same prompt length: both generate from the same step on.
        requests = [_request(f"{i} {PROMPTS[2]}", max_tokens=40) for i in range(streams)]
        return list(await asyncio.gather(*(_run(engine, r) for r in requests)))

    replies = loaded.loop.run_until_complete(together())
    assert [r.usage.completion_tokens for r in replies] == [40] * streams
    assert len(woken) >= 30
    assert sum(woken[1:-1]) / len(woken[1:-1]) == pytest.approx(wakes_per_step, abs=0.05)


def test_shared_prefix_reports_cached_tokens(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=2)
    loop = loaded.loop
    first = loop.run_until_complete(_run(engine, _request(PROMPTS[3])))
    assert first.usage.cached_tokens == 0
    again = loop.run_until_complete(_run(engine, _request(PROMPTS[3] + " And rivers?")))
    assert 0 < again.usage.cached_tokens < again.usage.prompt_tokens
    runtime = engine._runtime
    assert runtime is not None
    one, two = (
        runtime.tokenize(engine.render_prompt(_request(p))) for p in (PROMPTS[3], PROMPTS[3] + " And rivers?")
    )
    shared = next(i for i, (a, b) in enumerate(zip(one, two, strict=False)) if a != b)
    assert again.usage.cached_tokens == shared


def test_one_prompt_for_n_choices_is_decoded_once(loaded: Any) -> None:
    """Three sequences of the same prompt at once (the `n` choices of one request): one decodes
    the prompt, the others wait for it and copy its cells (cached: all but the last token), and
    each still samples what it samples alone."""
    engine = loaded(batching=True, parallel=3, batch_size=8)  # the prompt takes several steps
    loop = loaded.loop
    prompt = PROMPTS[3] * 2

    async def together() -> list[Reply]:
        return list(
            await asyncio.gather(*(_run(engine, _request(prompt, temperature=1.0, seed=i)) for i in range(3)))
        )

    batched = loop.run_until_complete(together())
    prompt_tokens = batched[0].usage.prompt_tokens
    assert prompt_tokens > 40
    assert sorted(r.usage.cached_tokens for r in batched) == [0, prompt_tokens - 1, prompt_tokens - 1]
    assert len({r.text for r in batched}) == 3
    alone = [
        loop.run_until_complete(_run(engine, _request(prompt, temperature=1.0, seed=i))) for i in range(3)
    ]
    assert [r.text for r in batched] == [r.text for r in alone]


def test_prompt_progress_in_chunks(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=2, batch_size=8)
    reply = loaded.loop.run_until_complete(_run(engine, _request(PROMPTS[3] * 3)))
    assert len(reply.progress) > 3 and reply.progress[-1] == 1.0
    assert reply.progress == sorted(reply.progress)


def test_cancel_one_others_run_and_cells_freed(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=3)
    loop = loaded.loop
    scheduler = engine._scheduler
    assert scheduler is not None

    async def scenario() -> tuple[list[Reply], list[int]]:
        long = _request(PROMPTS[0], max_tokens=400)
        engine.check(long)
        stream: AsyncIterator[RawEvent] = engine_events(engine, long)
        texts = 0
        async for event in stream:
            texts += isinstance(event, TextDelta)
            if texts >= 5:
                break
        others = asyncio.gather(*(_run(engine, _request(p, max_tokens=60)) for p in PROMPTS[1:3]))
        await asyncio.sleep(0)
        await stream.aclose()  # the client went away: its sequence alone is dropped
        replies = list(await others)
        # Read the cells on the worker thread: the loop is idle now, and runs nothing else.
        cells = [scheduler.slots[i].cached for i in range(3)]
        return replies, [len(c) for c in cells]

    replies, _ = loop.run_until_complete(scenario())
    assert all(r.finish.value == "length" and r.usage.completion_tokens == 60 for r in replies)
    dropped = [s for s in scheduler.slots if not s.cached]
    assert len(dropped) == 1  # the cancelled sequence's slot holds nothing
    memory = engine._runtime.context.memory  # type: ignore[union-attr]
    import llama_cpp

    assert llama_cpp.llama_memory_seq_pos_max(memory, dropped[0].id) == -1  # its cells are free


def test_too_long_prompt_is_the_context_error(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=2)
    request = _request("weather " * 600)
    with pytest.raises(Exception) as info:
        loaded.loop.run_until_complete(_run(engine, request))
    assert "context" in str(info.value)


def test_request_context_cap(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=2)
    request = _request(PROMPTS[0], max_tokens=None)
    request.options = RequestOptions(context_length=64)
    reply = loaded.loop.run_until_complete(_run(engine, request))
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == 64


def test_unload_fails_running_requests(loaded: Any) -> None:
    engine = loaded(batching=True, parallel=2, context_length=4096)

    async def scenario() -> None:
        request = _request(PROMPTS[0], max_tokens=4000)
        engine.check(request)
        stream = engine_events(engine, request)
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await engine.unload()
        with pytest.raises(EngineFailure):
            async for _ in stream:
                pass

    loaded.loop.run_until_complete(scenario())


def test_running_sequences_stay_in_adjacent_slots(loaded: Any) -> None:
    """llama.cpp decodes a run of consecutive sequence ids in one pass over the weights: a new
    request takes the free slot next to the running ones, and when another free slot holds a
    longer prefix of its prompt, that cache is copied over (cached tokens, the same reply)."""
    engine = loaded(batching=True, parallel=3)
    loop = loaded.loop
    scheduler = engine._scheduler
    runtime = engine._runtime
    assert scheduler is not None and runtime is not None
    prompts = [f"{p} Please answer at length, with examples and details. " * 3 for p in PROMPTS[:3]]

    async def fill() -> list[Reply]:
        return list(await asyncio.gather(*(_run(engine, _request(p, max_tokens=8)) for p in prompts)))

    loop.run_until_complete(fill())  # slots 0, 1, 2 each cache a prompt and its reply
    cached = [list(slot.cached) for slot in scheduler.slots]
    follow_up = _request(prompts[2] + " And in winter?")
    tokens = runtime.tokenize(engine.render_prompt(follow_up))

    def shared(a: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, tokens, strict=False)) if x != y), len(a))

    source = max(range(3), key=lambda i: shared(cached[i]))

    async def beside_a_long_one() -> tuple[Reply, int]:
        long = _request(PROMPTS[3], max_tokens=200)
        engine.check(long)
        stream = engine_events(engine, long)
        async for event in stream:  # running now, in one of the slots
            if isinstance(event, TextDelta):
                break
        busy = next(s.id for s in scheduler.slots if s.sequence is not None)
        try:
            return await _run(engine, follow_up), busy
        finally:
            await stream.aclose()

    reply, busy = loop.run_until_complete(beside_a_long_one())
    assert reply.usage.cached_tokens == shared(cached[source]) > 32
    placed = next(s.id for s in scheduler.slots if s.cached[: len(tokens)] == tokens)
    assert abs(placed - busy) == 1  # beside the running one
    if abs(source - busy) != 1:  # the reused cache was elsewhere: copied, and kept there too
        assert placed != source and scheduler.slots[source].cached == cached[source]
    # The copied cache gives the reply a fresh engine gives from scratch.
    fresh = loaded(batching=True, parallel=1)
    alone = loop.run_until_complete(_run(fresh, _request(prompts[2] + " And in winter?")))
    assert alone.usage.cached_tokens == 0
    assert reply.text == alone.text != ""


LONG = " ".join(f"{i}: {p}" for i in range(16) for p in PROMPTS)


def test_short_request_is_not_stuck_behind_a_long_prompt(loaded: Any) -> None:
    """On the CPU a step holds at most 128 prompt tokens (scheduler.CPU_PREFILL_CHUNK), whatever
    `batch_size`: a short request admitted while a long prompt is decoded has its whole reply
    within a few of the long prompt's chunks."""
    engine = loaded(batching=True, parallel=2, batch_size=512, context_length=4096)
    loop = loaded.loop

    async def scenario() -> tuple[list[float], float, float]:
        long = _request(LONG, max_tokens=2)
        engine.check(long)
        long_progress: list[float] = []
        first: asyncio.Future[None] = loop.create_future()

        async def run_long() -> None:
            async for event in engine_events(engine, long):
                if isinstance(event, PromptProgress):
                    long_progress.append(event.progress)
                    if not first.done():
                        first.set_result(None)

        task = asyncio.ensure_future(run_long())
        await first
        at_start = long_progress[-1]
        short = await _run(engine, _request("Hi", max_tokens=4))
        at_end = long_progress[-1]
        await task
        assert short.finish.value == "length"
        return long_progress, at_start, at_end

    progress, at_start, at_end = loop.run_until_complete(scenario())
    runtime = engine._runtime
    assert runtime is not None
    tokens = len(runtime.tokenize(engine.render_prompt(_request(LONG))))
    assert tokens > 1000 and len(progress) >= tokens // 128  # chunks of at most 128 tokens
    # The short reply (prompt + 4 tokens: 5 steps) took a few of the long prompt's chunks.
    assert (at_end - at_start) * tokens <= 7 * 128
    assert at_end < 1.0
