"""A request's `n` > 1 choices (OpenAI's `n`): `n` generations of the one request, each
through its own pipeline (stream core, accumulator, the dialect's encoder for choice `i`),
their frames interleaved as they come; the usage summed once at the end.

Each generation is an ordinary one (`n` = 1): any engine runs it, an upstream gets `n`
requests. With a fixed `seed`, choice `i` samples with `seed + i`, so the choices differ; at
temperature 0 they are the same text, as OpenAI's and llama-server's are. On the llamacpp
engine the generations are sequences of one context, run side by side by its scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import Usage, UsageReport
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.ids import new_id
from sluicegate.core.owned import Owned
from sluicegate.core.pipeline import StreamLimits, stream_deadline
from sluicegate.core.request import ChatRequest, RawPrompt
from sluicegate.dialects.base import Choices, Dialect, EncoderContext, Turn
from sluicegate.engines.models import Model
from sluicegate.observe.requests import EventTap
from sluicegate.tools.catalog import ToolSet
from sluicegate.transport.answer_first import Opened
from sluicegate.turn.http import INSTANCE_HEADER, safe_headers
from sluicegate.turn.pipeline import TurnPipeline

log = logging.getLogger(__name__)
SEED_MODULUS = 2**32  # llama.cpp's seeds are 32-bit: seed + i wraps there


def choice_request(chat: ChatRequest, index: int, prompt: RawPrompt | None = None) -> ChatRequest:
    """Choice `index`'s own request: one choice, its own seed when one is fixed; or, with its
    own `prompt` (several prompts in one request), that prompt and the request's seed."""
    if prompt is not None:
        return replace(chat, prompt=prompt, sampling=replace(chat.sampling, n=1))
    seed = chat.sampling.seed
    if seed is not None:
        seed = (seed + index) % SEED_MODULUS
    return replace(chat, sampling=replace(chat.sampling, n=1, seed=seed))


def refuse(message: str) -> SluicegateError:
    return SluicegateError(ErrorKind.INVALID_REQUEST, message, param="n", code="unsupported_parameter")


def summed(usages: Sequence[Usage]) -> Usage:
    """The request's usage: the prompt once (every choice read the same one), the output of all.
    Its cached tokens are the fewest any choice found (the choices that waited for the first to
    decode the prompt copied it: `engines/llamacpp/scheduler.py`)."""
    first = usages[0]
    return Usage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_tokens=min(u.cached_tokens for u in usages),
        reasoning_tokens=sum(u.reasoning_tokens for u in usages),
        audio_tokens=first.audio_tokens,
        accepted_prediction_tokens=sum(u.accepted_prediction_tokens for u in usages),
        rejected_prediction_tokens=sum(u.rejected_prediction_tokens for u in usages),
        shifted_tokens=sum(u.shifted_tokens for u in usages),
    )


async def open_choices(
    dialect: Dialect,
    turn: Turn,
    chat: ChatRequest,
    model: Model,
    toolset: ToolSet | None,
    owned: Owned,
    limits: StreamLimits,
    scope: str,
    answer: Callable[[Opened], Awaitable[Opened]],
) -> ChoicesRun:
    """Open one generation per choice, each on `owned`, and a pipeline for each; `answer`
    waits for an upstream engine to accept a generation (`transport/answer_first.py`)."""
    n = chat.sampling.n
    choices = dialect.choices(turn)
    if choices is None:
        raise refuse(f"n={n} is not supported here; this API answers with one choice.")
    if turn.store or turn.background or turn.conversation is not None:
        raise refuse("n above 1 is not supported for a stored, background or continued response.")
    if toolset is not None:
        raise refuse(
            f"n={n} is not supported while the server's own tools (MCP servers, plugins) are configured."
        )
    generations = []
    for index in range(n):  # admitted one by one: a full queue refuses the request at once
        generation = await model.admit(
            choice_request(chat, index, choices.prompt(index))
        )  # its check off the loop
        owned.push_async_callback(generation.aclose)
        generations.append(generation)
    turn_id = new_id(turn.id_prefix, turn.id_length)
    created = int(time.time())
    pipelines: list[TurnPipeline] = []
    headers: dict[str, str] = {}
    for index, generation in enumerate(generations):
        opened = await answer(Opened(generation.events))
        headers = {**opened.headers, **headers}
        accumulator = Accumulator()
        context = EncoderContext(
            turn_id=turn_id,
            created=created,
            instance_id=generation.instance_id,
            accumulator=accumulator,
            provider_info=lambda _name: None,
            stored=False,
            scope=scope,
        )
        pipeline = TurnPipeline(
            opened.events,
            choices.encoder(index, context),
            accumulator,
            None,
            EventTap.current(),
            deadline=stream_deadline(limits),
        )
        pipeline.open()  # encoded now: a failure here is still an HTTP error
        pipelines.append(pipeline)
    headers = safe_headers(
        {
            INSTANCE_HEADER: generations[0].instance_id,
            **headers,
            **chat.response_headers,
            **turn.headers,
            "X-Request-ID": turn_id,
        }
    )
    return ChoicesRun(pipelines, choices, EventTap.current(), turn_id=turn_id, headers=headers)


class ChoicesRun:
    """The `n` pipelines of one request, streamed (`frames`) or collected (`collect`)."""

    def __init__(
        self,
        pipelines: list[TurnPipeline],
        choices: Choices,
        tap: EventTap | None,
        *,
        turn_id: str,
        headers: dict[str, str],
    ) -> None:
        self.turn_id = turn_id
        self.headers = headers  # the response's (the first generation's instance)
        self.pipelines = pipelines
        self.choices = choices
        self.tap = tap  # the request's metrics and access line: each choice's tap saw its own usage

    def usage(self) -> Usage:
        usage = summed([p.accumulator.result.usage for p in self.pipelines])
        if self.tap is not None:
            self.tap.see(UsageReport(usage))  # the request's usage is every choice's
        return usage

    async def frames(self) -> AsyncGenerator[list[Frame], None]:
        """Every choice's frames as they come (one task per choice, a bounded queue between),
        then the summed usage and the one closing."""
        queue: asyncio.Queue[list[Frame] | None] = asyncio.Queue(maxsize=2 * len(self.pipelines))
        tasks = [asyncio.create_task(_pump(p, queue)) for p in self.pipelines]
        try:
            running = len(tasks)
            while running:
                frames = await queue.get()
                if frames is None:
                    running -= 1
                elif frames:
                    yield frames
            # The dialect's own closing, once (`[DONE]`; none for llama-server's `/completion`).
            yield [*self.choices.ending(self.usage()), *self.pipelines[0].encoder.closing()]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def collect(self) -> list[ChatResult]:
        return list(await asyncio.gather(*(p.collect() for p in self.pipelines)))

    def body(self, results: Sequence[ChatResult]) -> dict[str, Any] | list[dict[str, Any]]:
        return self.choices.body(results, self.usage())

    async def abandon(self, reason: str) -> None:
        for pipeline in self.pipelines:
            await pipeline.abandon(reason)


async def _pump(pipeline: TurnPipeline, queue: asyncio.Queue[list[Frame] | None]) -> None:
    """One choice's stream into the queue, without its closing (`[DONE]` comes once, at the
    end); then its end. Cancelled: nothing more (the consumer is gone)."""
    try:
        async for frames in pipeline.frames():
            kept = [frame for frame in frames if frame is not DONE]
            if kept:
                await queue.put(kept)
    except asyncio.CancelledError:
        raise
    except Exception:  # the pipeline ends its stream itself; this is a bug, not a hang
        log.exception("a choice's stream failed")
    await queue.put(None)
