"""One request's generation inside a batch: its prompt cursor, its sampler chain, its output.

The scheduler (scheduler.py) decodes many of these in one `llama_decode` per step; a
`Sequence` only ever sees its own logits (the batch row the scheduler names) and turns each
token it samples into events, exactly as the single-sequence loop in runtime.py does: the same
sampler chain (grammar first), stop strings, logprobs, limit and finish reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import llama_cpp

from sluicegate.core.events import (
    Finished,
    FinishReason,
    ItemKind,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    TextDelta,
    TokenLogprob,
    Usage,
    UsageReport,
)
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime, _Samplers, logprobs_wanted, output_limit
from sluicegate.engines.llamacpp.server_stats import STATS
from sluicegate.engines.llamacpp.stops import StopScanner
from sluicegate.engines.llamacpp.utf8 import PieceDecoder
from sluicegate.observe.metrics import METRICS


class Sequence:
    """Created on the event loop, then owned by the scheduler's thread."""

    __slots__ = (
        "_decoder",
        "_limit",
        "_pending",
        "_reasoning",
        "_sampling_at",
        "_started_at",
        "_stops",
        "_top",
        "_word",
        "base",
        "cap",
        "done",
        "fail",
        "history",
        "job",
        "lora",
        "next_token",
        "pin",
        "prompt",
        "prompt_done",
        "samplers",
        "slot",
        "todo",
    )

    def __init__(
        self,
        job: Job,
        prompt: str,
        *,
        cap: int | None,
        fail: Callable[[BaseException], None],
        done: Callable[[], None],
        pin: int | None = None,
        lora: tuple[float, ...] = (),
    ) -> None:
        self.job = job
        self.lora = lora  # its LoRA adapters' scales (lora.py); (): the model has none
        self.pin = pin  # llama-server's `id_slot`: admitted into that slot only
        self.prompt = prompt  # tokenized on the scheduler's thread when `job.tokens` is empty
        self.cap = cap  # a per-request context cap (`options.context_length`), or None
        self.fail = fail  # carries an error to the consumer
        self.done = done  # closes the consumer's channel; called exactly once
        self.slot = -1  # the llama.cpp sequence id while admitted
        self.todo: list[int] = []  # prompt tokens not in the cache when admitted
        self.base = 0  # where `todo` starts in the prompt
        self.prompt_done = 0  # of `todo`, decoded so far
        self.samplers: _Samplers | None = None
        self.next_token: int | None = None  # sampled, to be decoded in the next step
        # Prompt and output so far, ending with `next_token`: what an n-gram draft looks in.
        self.history: list[int] = []
        self._decoder = PieceDecoder()
        self._stops = StopScanner(job.sampling.stop)
        self._word: str | None = None  # the stop string that ended the output
        self._pending: list[TokenLogprob] = []
        sampling = job.sampling
        self._top = logprobs_wanted(sampling)
        self._limit = 0
        self._started_at = self._sampling_at = 0.0  # perf_counter(): admitted, prompt decoded
        self._reasoning = job.reasoning is not None  # only then may the parser emit reasoning

    @property
    def prefilling(self) -> bool:
        return self.prompt_done < len(self.todo)

    def start(self, cached: int) -> None:
        """Admitted with `cached` prompt tokens already in its slot's cache."""
        tokens = self.job.tokens
        self.todo = tokens[cached:]
        self.base = cached
        self.prompt_done = 0
        self._started_at = time.perf_counter()
        self.job.usage = Usage(prompt_tokens=len(tokens), cached_tokens=cached)
        self.job.emit([PromptStarted(len(tokens), cached)])

    def prefilled(self, count: int) -> None:
        self.prompt_done += count
        total = self.base + len(self.todo)
        done = self.base + self.prompt_done
        self.job.emit(
            [PromptProgress(self.prompt_done / len(self.todo), processed=done, total=total, cached=self.base)]
        )

    def begin_sampling(self, runtime: LlamaRuntime) -> None:
        """The prompt is in: report it, and build the sampler chain (may raise for a grammar)."""
        usage = self.job.usage
        self._sampling_at = time.perf_counter()
        self.job.emit([PromptFinished(), UsageReport(Usage(usage.prompt_tokens, 0, usage.cached_tokens))])
        self._limit = output_limit(self.job, runtime.n_ctx - usage.prompt_tokens)
        self.samplers = _Samplers(runtime, self.job)
        self.history = list(self.job.tokens)

    def draft_room(self) -> int:
        """How many draft tokens may follow `next_token`: what the output limit leaves after
        the token each of them would be verified into (and so what the context leaves). Under
        a grammar too: its sampler only ever sees the tokens the target draws, so a draft token
        it would refuse is never drawn, and the grammar's state never needs rolling back."""
        return self._limit - self.job.usage.completion_tokens - 1

    def accept(self, runtime: LlamaRuntime, index: int) -> FinishReason | None:
        """Sample from batch row `index`; None to go on (with `next_token` to decode)."""
        samplers, job = self.samplers, self.job
        assert samplers is not None
        ctx: Any = runtime.context.ctx
        constrained = samplers.grammar  # check-first grammar sampling, as the one-sequence path
        if constrained is None:
            if samplers.greedy:
                token = runtime.argmax(index)
            elif samplers.fast is not None:  # the chain on the top k of the logits
                token = samplers.fast.sample(runtime.logits(index))
            else:
                token = int(llama_cpp.llama_sampler_sample(samplers.plain, ctx, index))
        else:
            token = constrained.sample(ctx, index)
        if samplers.watching:
            token = samplers.watch(token, ctx, index)
        self.next_token = None
        # The runtime's per-token caches read here (a miss asks llama.cpp through its method):
        # two calls a row fewer on the worker, which holds the GIL between two decodes.
        eog = runtime._eog.get(token)
        if eog is None:
            eog = runtime.is_eog(token)
        if eog:
            return FinishReason.STOP
        usage = job.usage
        usage.completion_tokens += 1
        METRICS.counters[job.tokens_key] += 1
        if self._top >= 0:
            self._pending.append(runtime._logprob(token, self._top, index))
        piece = runtime._pieces.get(token)
        if piece is None:
            piece = runtime.piece(token)
        text, stopped = self._stops.feed(self._decoder.decode(piece))
        if text:
            events = job.parser.feed(text, self._pending or None)
            self._pending = []
            if events:
                if self._reasoning:
                    usage.reasoning_tokens += any(
                        type(e) is TextDelta and e.channel is ItemKind.REASONING for e in events
                    )
                job.emit(events)
        if stopped:
            self._word = self._stops.reached
            self._stops = StopScanner([])  # nothing held back once a stop string was reached
            self._decoder = PieceDecoder()
            return FinishReason.STOP
        if usage.completion_tokens >= self._limit:
            return FinishReason.LENGTH
        self.next_token = token
        self.history.append(token)
        return None

    def finish(self, finish: FinishReason) -> None:
        """The last events: held-back text, the parser's tail, usage and the finish reason."""
        job, parser = self.job, self.job.parser
        tail = self._stops.flush() + self._decoder.decode(b"", final=True)
        events = (parser.feed(tail, self._pending or None) if tail else []) + parser.finish()
        if finish is FinishReason.STOP and parser.saw_tool_calls:
            finish = FinishReason.TOOL_CALLS
        usage = job.usage
        STATS.finished(
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            self._sampling_at - self._started_at,
            time.perf_counter() - self._sampling_at,
        )
        final = Usage(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage.reasoning_tokens,
            accepted_prediction_tokens=usage.accepted_prediction_tokens,
            rejected_prediction_tokens=usage.rejected_prediction_tokens,
            shifted_tokens=usage.shifted_tokens,
        )
        word = self._word if finish is FinishReason.STOP else None
        job.emit([*events, UsageReport(final), Finished(finish, word)])

    def next_image(self) -> tuple[bool, int | None]:
        """Whether the prompt goes on with an image now, and where its next image starts
        (an index in `todo`), if it has one."""
        media = self.job.media
        if media is None:
            return False, None
        here = self.base + self.prompt_done
        if media.covering(here) is not None:  # at an image's start, or part-way through it
            return True, self.prompt_done
        start = media.next_image(here)
        return False, None if start is None else start - self.base

    def free(self) -> None:
        self.job.free()
        if self.samplers is not None:
            self.samplers.free()
            self.samplers = None
