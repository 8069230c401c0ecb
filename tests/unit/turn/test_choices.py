"""`n` > 1 choices (`turn/choices.py`, `dialects/choices.py`): each choice's encoder writes its
own index and leaves the usage out; a stream interleaves the choices' frames, ends with one
summed usage chunk and one `[DONE]`; the body lists every choice with the summed usage; a
consumer that leaves closes every choice's engine stream. Each frame is checked with the
official `openai` types."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import Finished, FinishReason, ItemKind, RawEvent, TextDelta, Usage, UsageReport
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.owned import Owned
from sluicegate.core.pipeline import StreamLimits
from sluicegate.core.request import ChatRequest, Message, SamplingParams
from sluicegate.dialects.anthropic.dialect import AnthropicDialect
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.base import EncoderContext, Turn
from sluicegate.dialects.chat_completions.dialect import ChatCompletionsDialect
from sluicegate.dialects.chat_completions.request import ChatOptions
from sluicegate.dialects.completions.dialect import CompletionsDialect
from sluicegate.dialects.completions.request import CompletionOptions
from sluicegate.observe.requests import EventTap, RequestObserver
from sluicegate.turn.choices import ChoicesRun, choice_request, open_choices, summed
from sluicegate.turn.pipeline import TurnPipeline


def _reads(text: str, completion_tokens: int, cached: int) -> list[RawEvent]:
    return [
        TextDelta(ItemKind.MESSAGE, text[:2]),
        TextDelta(ItemKind.MESSAGE, text[2:]),
        UsageReport(Usage(prompt_tokens=10, completion_tokens=completion_tokens, cached_tokens=cached)),
        Finished(FinishReason.STOP),
    ]


class Engine:
    """One choice's raw events; `closed` once its consumer closed it."""

    def __init__(self, events: list[RawEvent], gate: asyncio.Event | None = None) -> None:
        self.events = events
        self.gate = gate
        self.closed = False

    async def stream(self) -> AsyncIterator[RawEvent]:
        try:
            for event in self.events:
                if self.gate is not None:
                    await self.gate.wait()
                yield event
                await asyncio.sleep(0)  # the other choices' reads come in between
        finally:
            self.closed = True


def _context(accumulator: Accumulator) -> EncoderContext:
    return EncoderContext("cmpl-1", 7, "i", accumulator, lambda _: None, stored=False)


def _run(
    turn: Turn, dialect: Any, engines: list[Engine], observer: RequestObserver | None = None
) -> ChoicesRun:
    choices = dialect.choices(turn)
    pipelines = []
    for index, engine in enumerate(engines):
        accumulator = Accumulator()
        tap = EventTap(observer) if observer is not None else None
        pipeline = TurnPipeline(
            engine.stream(), choices.encoder(index, _context(accumulator)), accumulator, None, tap
        )
        pipeline.open()
        pipelines.append(pipeline)
    tap = EventTap(observer) if observer is not None else None
    return ChoicesRun(pipelines, choices, tap, turn_id="cmpl-1", headers={})


def _chat_turn(include_usage: bool) -> Turn:
    chat = ChatRequest(model="m", messages=[Message("user", "hi")], sampling=SamplingParams(n=2))
    return Turn(request=ChatOptions(stream=True, include_usage=include_usage), chat=chat, stream=True)


def _engines() -> list[Engine]:
    return [Engine(_reads("Hello", 3, 0)), Engine(_reads("World", 4, 9))]


async def _frames(run: ChoicesRun) -> list[Frame]:
    return [frame async for frames in run.frames() for frame in frames]


def test_a_chat_stream_interleaves_the_choices_and_sums_the_usage_once() -> None:
    frames = asyncio.run(_frames(_run(_chat_turn(True), ChatCompletionsDialect(), _engines())))
    assert frames[-1] is DONE and DONE not in frames[:-1]
    chunks = [ChatCompletionChunk.model_validate(orjson.loads(f.data)) for f in frames[:-1]]
    indexes = [c.choices[0].index for c in chunks if c.choices]
    assert indexes != sorted(indexes)  # interleaved as they come, not one choice after the other
    text = {
        i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in (0, 1)
    }
    assert text == {0: "Hello", 1: "World"}
    finishes = [
        (c.choices[0].index, c.choices[0].finish_reason)
        for c in chunks
        if c.choices and c.choices[0].finish_reason
    ]
    assert sorted(finishes) == [(0, "stop"), (1, "stop")]
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and chunks[-1].choices == [] and chunks[-1].usage is not None
    # The prompt once, every choice's output; cached: the fewest a choice found.
    assert (usages[0].prompt_tokens, usages[0].completion_tokens, usages[0].total_tokens) == (10, 7, 17)
    assert usages[0].prompt_tokens_details is not None and usages[0].prompt_tokens_details.cached_tokens == 0


@pytest.mark.parametrize("stream", [True, False])
def test_the_requests_metrics_and_key_usage_see_the_summed_usage(stream: bool) -> None:
    observer = RequestObserver("chat_completions")
    run = _run(_chat_turn(True), ChatCompletionsDialect(), _engines(), observer)
    if stream:
        asyncio.run(_frames(run))
    else:
        run.body(asyncio.run(run.collect()))
    assert (observer.prompt_tokens, observer.completion_tokens, observer.generating) == (10, 7, 0)


def test_without_include_usage_no_usage_chunk() -> None:
    frames = asyncio.run(_frames(_run(_chat_turn(False), ChatCompletionsDialect(), _engines())))
    assert all(b'"usage"' not in f.data for f in frames)
    assert frames[-1] is DONE


def test_the_chat_body_lists_every_choice() -> None:
    run = _run(_chat_turn(False), ChatCompletionsDialect(), _engines())
    body = run.body(asyncio.run(run.collect()))
    completion = ChatCompletion.model_validate(body)
    assert [(c.index, c.message.content, c.finish_reason) for c in completion.choices] == [
        (0, "Hello", "stop"),
        (1, "World", "stop"),
    ]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (10, 7)


def test_completions_frames_and_body() -> None:
    chat = ChatRequest(model="m", messages=[], sampling=SamplingParams(n=2))
    turn = Turn(
        request=CompletionOptions(stream=True, include_usage=True, echo=False), chat=chat, stream=True
    )
    frames = asyncio.run(_frames(_run(turn, CompletionsDialect(), _engines())))
    assert frames[-1] is DONE and DONE not in frames[:-1]
    # (The SDK reads these chunks unvalidated: `finish_reason` is null until the last.)
    chunks = [orjson.loads(f.data) for f in frames[:-1]]
    text = {
        i: "".join(c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["index"] == i)
        for i in (0, 1)
    }
    assert text == {0: "Hello", 1: "World"}
    finishes = sorted(
        (c["choices"][0]["index"], c["choices"][0]["finish_reason"])
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"]
    )
    assert finishes == [(0, "stop"), (1, "stop")]
    usages = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usages) == 1 and usages[0]["completion_tokens"] == 7 and chunks[-1]["choices"] == []
    run = _run(turn, CompletionsDialect(), _engines())
    body = Completion.model_validate(run.body(asyncio.run(run.collect())))
    assert [(c.index, c.text) for c in body.choices] == [(0, "Hello"), (1, "World")]
    assert body.usage is not None and (body.usage.prompt_tokens, body.usage.completion_tokens) == (10, 7)


def test_a_consumer_that_leaves_closes_every_choice() -> None:
    gate = asyncio.Event()
    engines = [Engine(_reads("Hello", 3, 0)), Engine(_reads("World", 4, 0), gate)]

    async def leave() -> None:
        frames = _run(_chat_turn(True), ChatCompletionsDialect(), engines).frames()
        first = await anext(frames)  # choice 0 streams, choice 1 waits at its gate
        assert first
        await frames.aclose()

    asyncio.run(leave())
    assert all(engine.closed for engine in engines)


def test_each_choice_samples_with_its_own_seed() -> None:
    chat = ChatRequest(model="m", messages=[], sampling=SamplingParams(n=3, seed=2**32 - 1))
    assert [choice_request(chat, i).sampling.seed for i in range(3)] == [2**32 - 1, 0, 1]
    assert all(choice_request(chat, i).sampling.n == 1 for i in range(3))
    unseeded = ChatRequest(model="m", messages=[], sampling=SamplingParams(n=2))
    assert choice_request(unseeded, 1).sampling.seed is None


def test_summed_usage() -> None:
    usage = summed([Usage(10, 3, 9, 1), Usage(10, 4, 0, 2)])
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == (
        10,
        7,
        0,
        3,
    )


@pytest.mark.parametrize("case", ["no_n_in_the_dialect", "stored", "server_tools"])
def test_what_n_cannot_serve_is_a_400_naming_n(case: str) -> None:
    """Refused before any generation is opened (the model is never asked)."""
    turn = _chat_turn(False)
    dialect: Any = ChatCompletionsDialect()
    toolset: Any = None
    if case == "no_n_in_the_dialect":
        dialect = AnthropicDialect(ThinkingSigner(b"k" * 32))
    elif case == "stored":
        turn.store = True
    else:
        toolset = object()
    opening = open_choices(
        dialect,
        turn,
        turn.chat,
        None,
        toolset,
        Owned(),
        StreamLimits(),
        "",
        answer=None,  # type: ignore[arg-type]
    )
    with pytest.raises(SluicegateError) as caught:
        asyncio.run(opening)
    assert caught.value.info.status == 400 and caught.value.info.param == "n"
