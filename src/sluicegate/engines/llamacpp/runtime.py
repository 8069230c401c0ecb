"""One loaded GGUF with one llama.cpp context, driven from a single worker thread.

Built from llama-cpp-python's low-level bindings rather than its `Llama` class, because
serving needs what that class hides: the model-load progress callback, prompt decoding in
batches we can report on, and a per-token loop with nothing in it but sampling, detokenizing
and the checks a server must make (cancelled? stop string? limit?).

The context holds one sequence. `evaluated` lists the tokens whose keys and values are in the
KV cache, so a prompt that starts the same way (the next turn of a chat) only decodes the rest.
"""

from __future__ import annotations

import codecs
import ctypes
import math
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp
from llama_cpp import _logger

from sluicegate.core.errors import EngineFailure
from sluicegate.core.events import (
    Finished,
    FinishReason,
    ItemKind,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp import samplers, shift
from sluicegate.engines.llamacpp.constrained import GrammarSampler, vocab_tokenizer
from sluicegate.engines.llamacpp.grammar import Grammar
from sluicegate.engines.llamacpp.handles import Batch, Context, Model
from sluicegate.engines.llamacpp.stops import StopScanner
from sluicegate.engines.llamacpp.vision import ImageSpan, Media, MediaPrompt, Projector
from sluicegate.observe.metrics import METRICS
from sluicegate.parsing import ReasoningStyle, StreamParser

if TYPE_CHECKING:  # imported where first used (grammar.py says why)
    import numpy as np
    from llguidance import LLTokenizer

    from sluicegate.engines.llamacpp.top_k_chain import TopKChain

_backend_ready = False

# llama.cpp's own defaults (and llama-cpp-python's), for what a request leaves unset.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
PENALTY_LAST_N = 64
# From this vocabulary size up, a chain that starts with top-k gets its candidates from numpy
# (top_k_chain.py): llama.cpp's array of the whole vocabulary costs more than numpy's calls.
FAST_CHAIN_VOCAB = 50_000


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        _logger.set_verbose(False)  # llama.cpp's chatter only for errors
        llama_cpp.llama_backend_init()
        _backend_ready = True


@dataclass(slots=True)
class Job:
    """One generation. The consumer sets `cancelled`; the worker checks it before every token."""

    tokens: list[int]
    sampling: SamplingParams
    seed: int
    parser: StreamParser  # PlainText for a text completion (nothing to parse)
    emit: Callable[[list[RawEvent]], None]
    tokens_key: tuple[str, Any]
    cancelled: bool = False
    usage: Usage = field(default_factory=Usage)
    # Constrained decoding: the grammar applies to the answer, never to a reasoning block. With
    # `reasoning`, it waits while the output is inside the block: from the start when the
    # prompt opened it (`in_reasoning`), or from a first token that opens it.
    grammar: Grammar | None = None
    reasoning: ReasoningStyle | None = None
    in_reasoning: bool = False
    # Images and audio clips, in prompt order (one marker each in the prompt), for a model with
    # a projector; `media` is the prompt tokenized with them (its chunks are freed with the job).
    pictures: list[Media] = field(default_factory=list)
    media: MediaPrompt | None = None
    # The request's predicted output as tokens (`ChatRequest.prediction`): its drafts
    # (prediction.py; batching only).
    prediction: list[int] | None = None
    # Context shift (shift.py): the tokens kept at the start when the context fills while
    # generating (the BOS token, if any, and `n_keep`; -1: the prompt); None: no shift.
    shift_keep: int | None = None

    def free(self) -> None:
        if self.media is not None:
            self.media.free()


class Vocabulary:
    """A GGUF's tokenizer alone (llama.cpp's `vocab_only` load: no weights, no context), to
    count a prompt's tokens before the model is loaded."""

    def __init__(self, path: Path) -> None:
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = Model(path_model=str(path), params=params)

    def tokenize(self, text: str) -> list[int]:
        tokens: list[int] = self.model.tokenize(
            text.encode("utf-8"), add_bos=self.model.add_bos_token(), special=True
        )
        return tokens

    def close(self) -> None:
        self.model.close()


class LlamaRuntime:
    def __init__(
        self,
        path: Path,
        *,
        context_length: int,
        n_gpu_layers: int,
        threads: int | None,
        batch_size: int,
        flash_attention: bool | None,
        on_progress: Callable[[float], None],
        repack: bool = False,
        pooling: int | None = None,
        sequences: int = 1,
        mmproj: Path | None = None,
    ) -> None:
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
        # Off by default: the CPU_REPACK buffer type (Q4_0, Q8_0, IQ4_NL, Q4_K weights
        # interleaved for its kernels) segfaulted in llama_decode on an AVX-512 machine.
        params.use_extra_bufts = repack

        def progress(value: float, _user: ctypes.c_void_p) -> bool:
            on_progress(float(value))
            return True

        # Kept referenced until the load returns: llama.cpp calls it from C.
        callback = llama_cpp.llama_progress_callback(progress)
        params.progress_callback = callback
        # llama.cpp's log level is set in `_init_backend` (fds 1 and 2 are never redirected).
        self.model = Model(path_model=str(path), params=params)
        ctx_params = llama_cpp.llama_context_default_params()
        # N sequences (continuous batching, scheduler.py): one stream of `context_length` cells
        # each (not a unified cache), so a sequence attends over its own cells only.
        ctx_params.n_ctx = context_length * sequences
        # (llama.cpp rounds a stream up to a multiple of 256 cells.)
        if sequences > 1:
            ctx_params.n_seq_max = sequences
            ctx_params.kv_unified = False
        # A sliding-window layer keeps the window's cells (plus a batch), not the context's:
        # llama.cpp's C default (true) gives every layer the full context, which for Gemma 3
        # (15 of its 18 layers use a 512-token window) is 2.7x the KV cache at 4k tokens per
        # sequence; llama-server's default is false too. What it costs is prefix reuse deep in
        # the past (`reusable`).
        ctx_params.swa_full = False
        if pooling is not None:  # an embedding model: one input is one batch (pooling needs it whole)
            import numpy  # noqa: F401 - its outputs are read with it: imported at load, not mid-request

            ctx_params.embeddings = True
            ctx_params.pooling_type = pooling
            batch_size = context_length
        ctx_params.n_batch = batch_size
        ctx_params.n_ubatch = batch_size
        if flash_attention is not None:
            ctx_params.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if flash_attention
                else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        # Unset: llama-cpp-python's choice (half the cores to decode, all of them for prompts).
        cores = os.cpu_count() or 1
        ctx_params.n_threads = threads or max(cores // 2, 1)
        ctx_params.n_threads_batch = threads or cores
        self.context = Context(model=self.model, params=ctx_params)
        self.batch = Batch(n_tokens=batch_size, embd=0, n_seq_max=1)
        self.batch_size = batch_size
        # Whether layers run on a GPU (prompt throughput then grows with the batch).
        self.offloaded = n_gpu_layers != 0 and bool(llama_cpp.llama_supports_gpu_offload())
        self.sequences = sequences
        self.n_ctx = llama_cpp.llama_n_ctx_seq(self.context.ctx)  # per sequence
        self.n_vocab = self.model.n_vocab()
        # The sliding window of the model's windowed layers (0: none), whose cache keeps only
        # the window's last cells.
        self.n_swa = int(llama_cpp.llama_model_n_swa(self.model.model))
        self.n_embd = int(llama_cpp.llama_model_n_embd_inp(self.model.model))  # an input embedding's size
        self.evaluated: list[int] = []
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buffer = ctypes.create_string_buffer(256)
        self._guidance: LLTokenizer | None = None
        self._guidance_lock = threading.Lock()
        self._closed = False
        self.projector: Projector | None = None
        if mmproj is not None:
            try:
                self.projector = Projector(
                    mmproj, self.model.model, threads=ctx_params.n_threads_batch, use_gpu=self.offloaded
                )
            except BaseException:
                self.close()
                raise

    def guidance(self) -> LLTokenizer:
        """The vocabulary as the grammar engine sees it, built by the first call and then kept.

        Built on demand, not at load: for Gemma 3's 262k tokens it holds ~95 MiB, which a server
        that never sees a structured request should not carry. The engine calls this off the
        event loop and off the worker before it hands a structured request to the scheduler
        (`LlamaCppEngine.generate`), so only that request waits (1-2.4 s quiet for 32k-262k
        tokens); concurrent callers wait for the one build."""
        with self._guidance_lock:
            if self._closed:
                raise EngineFailure("the model was unloaded", code="model_not_loaded")
            if self._guidance is None:
                self._guidance = vocab_tokenizer(self.model.vocab)
            return self._guidance

    @property
    def guidance_ready(self) -> bool:
        return self._guidance is not None

    def close(self) -> None:
        """Free the projector, the batch, the context and the weights now, not whenever the GC
        gets to them."""
        with self._guidance_lock:  # a build reads the vocabulary about to be freed: wait for it
            self._closed = True
            self._guidance = None  # it tokenizes through the model's vocabulary
        if self.projector is not None:
            self.projector.close()
        parts: list[Any] = [self.batch, self.context, self.model]
        for part in parts:
            part.close()

    def forget(self) -> None:
        """Drop the KV cache (after a failure left it in an unknown state)."""
        if self.context.memory:  # encoder-only embedding models have none
            self.context.clear_memory()
        self.evaluated.clear()

    def reusable(self, seq: int, keep: int) -> bool:
        """Whether a sequence can go on from its first `keep` cached tokens. A sliding-window
        layer reuses the cells of positions that fell out of every window, so the next token
        (at position `keep`) needs the window's cells before it to still be there."""
        if not self.n_swa or not keep:
            return True
        oldest = int(llama_cpp.llama_memory_seq_pos_min(self.context.memory, seq))
        return 0 <= oldest <= max(0, keep - self.n_swa + 1)

    # --- tokens ----------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Read-only use of the vocabulary: safe from any thread."""
        tokens: list[int] = self.model.tokenize(
            text.encode("utf-8"), add_bos=self.model.add_bos_token(), special=True
        )
        return tokens

    def prompt_tokens(self, job: Job, prompt: str) -> list[int]:
        """The job's prompt as tokens (with its images, through the projector); worker thread."""
        if not job.pictures:
            return self.tokenize(prompt)
        if self.projector is None:
            raise EngineFailure("this model has no projector", code="image_input_unsupported")
        job.media = self.projector.tokenize(prompt, job.pictures)
        return job.media.tokens

    def decode_image(self, media: MediaPrompt, start: int, *, position: int, seq_id: int) -> int:
        """Decode the image that starts at prompt index `start`; returns the positions it took."""
        span = media.span_at(start)
        assert span is not None and self.projector is not None
        self.projector.decode(
            self.context.ctx, span, position=position, seq_id=seq_id, n_batch=self.batch_size
        )
        return span.n_pos

    def decode_image_part(
        self, span: ImageSpan, *, done: int, count: int, position: int, seq_id: int
    ) -> None:
        """Decode embeddings `done` to `done + count` of an encoded image into `seq_id`."""
        import numpy as np  # an encoded image's rows are numpy's already

        assert span.embeddings is not None
        rows = span.embeddings[done : done + count]
        n_embd = rows.shape[1]
        batch = llama_cpp.llama_batch_init(count, n_embd, 1)
        try:
            ctypes.memmove(batch.embd, np.ascontiguousarray(rows, dtype=np.float32).ctypes.data, rows.nbytes)
            for i in range(count):
                batch.pos[i] = position + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq_id
                batch.logits[i] = False
            batch.n_tokens = count
            status = llama_cpp.llama_decode(self.context.ctx, batch)
        finally:
            llama_cpp.llama_batch_free(batch)
        if status != 0:
            raise EngineFailure(f"llama_decode failed on an image ({status})", code="decode_failed")

    def piece(self, token: int) -> bytes:
        """The token's bytes; control tokens (end of turn) are empty, text markers are text."""
        cached = self._pieces.get(token)
        if cached is None:
            buffer = self._piece_buffer
            size = llama_cpp.llama_token_to_piece(self.model.vocab, token, buffer, len(buffer), 0, False)
            cached = self._pieces[token] = buffer.raw[: max(size, 0)]
        return cached

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation; remembered, so a token costs one ctypes call (which
        also hands the GIL over) the first time only."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.model.vocab, token))
        return eog

    # --- decoding --------------------------------------------------------------------------

    def _decode(self, tokens: list[int]) -> None:
        self.batch.set_batch(tokens, n_past=len(self.evaluated), logits_all=False)
        status = llama_cpp.llama_decode(self.context.ctx, self.batch.batch)
        if status != 0:
            raise EngineFailure(f"llama_decode failed ({status})", code="decode_failed")
        self.evaluated.extend(tokens)

    def embed(self, tokens: list[int]) -> np.ndarray:
        """The pooled embedding of one input (as llama.cpp computes it, not normalised)."""
        import numpy as np  # where first used: a chat server never needs it (bindings.py)

        self.forget()
        self.batch.set_batch(tokens, n_past=0, logits_all=True)
        status = llama_cpp.llama_decode(self.context.ctx, self.batch.batch)
        if status != 0:
            raise EngineFailure(f"llama_decode failed ({status})", code="decode_failed")
        pointer = llama_cpp.llama_get_embeddings_seq(self.context.ctx, 0)
        if not pointer:
            raise EngineFailure("llama.cpp returned no pooled embedding", code="engine_error")
        size = llama_cpp.llama_model_n_embd(self.model.model)
        return np.ctypeslib.as_array(pointer, shape=(size,)).astype(np.float64)

    def _reuse(self, prompt: list[int], media: MediaPrompt | None = None) -> int:
        """Keep the cached prefix the prompt shares (minus one: its last token must be decoded
        again for fresh logits) and drop the rest from the KV cache."""
        keep = min(shared_prefix(self.evaluated, prompt), len(prompt) - 1)
        if media is not None:
            keep = media.snap(keep)
        if keep < len(self.evaluated):
            if not llama_cpp.llama_memory_seq_rm(self.context.memory, 0, keep, -1):
                keep = 0
                self.context.clear_memory()
            del self.evaluated[keep:]
        if not self.reusable(0, keep):
            keep = 0
            self.forget()
        return keep

    def prefill(self, job: Job) -> bool:
        """Decode the prompt in batches, reporting progress; False when cancelled."""
        prompt, media = job.tokens, job.media
        cached = self._reuse(prompt, media)
        job.emit([PromptStarted()])
        position, todo = cached, len(prompt) - cached
        while position < len(prompt):
            if job.cancelled:
                return False
            if media is not None and media.span_at(position) is not None:
                taken = self.decode_image(media, position, position=len(self.evaluated), seq_id=0)
                self.evaluated.extend(prompt[position : position + taken])
                position += taken
            else:
                end = min(position + self.batch_size, len(prompt))
                image = media.next_image(position) if media is not None else None
                self._decode(prompt[position : end if image is None else min(end, image)])
                position = end if image is None else min(end, image)
            job.emit(
                [
                    PromptProgress(
                        (position - cached) / todo, processed=position, total=len(prompt), cached=cached
                    )
                ]
            )
        job.usage = Usage(prompt_tokens=len(prompt), cached_tokens=cached)
        job.emit([PromptFinished(), UsageReport(Usage(len(prompt), 0, cached))])
        return True

    def _sampler(self, sampling: SamplingParams, seed: int) -> Any:
        """A llama.cpp sampler chain for the request; the caller frees it."""
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())

        def add(sampler: Any) -> None:
            llama_cpp.llama_sampler_chain_add(chain, sampler)

        if sampling.logit_bias:  # first, as llama.cpp's common sampler puts it: greedy obeys it too
            add(logit_bias_sampler(self.n_vocab, sampling.logit_bias))
        temperature = sampling.temperature if sampling.temperature is not None else DEFAULT_TEMPERATURE
        if temperature > 0 and (picker := samplers.mirostat(sampling, self.n_vocab, seed)) is not None:
            add(llama_cpp.llama_sampler_init_temp(temperature))  # mirostat replaces the rest
            add(picker)
            return chain
        repeat, frequency, presence = _penalties(sampling)
        last_n = PENALTY_LAST_N if sampling.repeat_last_n is None else sampling.repeat_last_n
        if (repeat != 1.0 or frequency or presence) and last_n:
            last_n = self.n_ctx if last_n < 0 else last_n  # -1: the whole context, as llama.cpp reads it
            add(llama_cpp.llama_sampler_init_penalties(self.n_vocab, last_n, repeat, frequency, presence))
        if (dry := samplers.dry(self.model.vocab, sampling, self.n_ctx)) is not None:
            add(dry)  # before greedy too: llama.cpp's temperature 0 takes the top token after it
        if temperature <= 0:
            add(llama_cpp.llama_sampler_init_greedy())
            return chain
        if (sigma := samplers.top_n_sigma(sampling)) is not None:
            add(sigma)
        top_k = sampling.top_k if sampling.top_k is not None else DEFAULT_TOP_K
        if top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(top_k))
        if sampling.typical_p is not None and sampling.typical_p < 1.0:  # llama.cpp's order: after top-k
            add(llama_cpp.llama_sampler_init_typical(sampling.typical_p, 1))
        add(
            llama_cpp.llama_sampler_init_top_p(
                sampling.top_p if sampling.top_p is not None else DEFAULT_TOP_P, 1
            )
        )
        add(
            llama_cpp.llama_sampler_init_min_p(
                sampling.min_p if sampling.min_p is not None else DEFAULT_MIN_P, 1
            )
        )
        if (exclude := samplers.xtc(sampling, seed)) is not None:
            add(exclude)
        add(llama_cpp.llama_sampler_init_temp(temperature))
        add(llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _logprob(self, token: int, top: int, index: int = -1) -> TokenLogprob:
        """The token's log-probability under the model (raw logits, before any sampler), from
        the logits of the batch's `index`th token."""
        import numpy as np  # where first used: a chat server never needs it (bindings.py)

        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(self.context.ctx, index), shape=(self.n_vocab,)
        )
        peak = float(logits.max())
        total = peak + math.log(float(np.exp(logits - peak).sum()))
        alternatives: list[TopLogprob] = []
        if top:
            best = np.argpartition(-logits, top)[:top] if top < self.n_vocab else np.arange(self.n_vocab)
            for index in sorted(best.tolist(), key=lambda i: -logits[i]):
                raw = self.piece(index)
                alternatives.append(
                    TopLogprob(raw.decode("utf-8", "replace"), float(logits[index]) - total, list(raw), index)
                )
        raw = self.piece(token)
        return TokenLogprob(
            raw.decode("utf-8", "replace"), float(logits[token]) - total, list(raw), alternatives, token
        )

    def generate(self, job: Job) -> None:
        """Prefill, then sample until end of turn, a stop string, the limit or a cancel."""
        if not self.prefill(job):
            return
        samplers = _Samplers(self, job)
        try:
            self._sample_loop(job, samplers)
        finally:
            samplers.free()

    def argmax(self, index: int = -1) -> int:
        """The greedy token of batch row `index`: the first of the highest logits, the token
        llama.cpp's greedy sampler picks, without its pass that copies every logit into a
        candidate array first (262,144 of them on Gemma 3: ~0.8 ms a token against ~0.03 ms,
        bench/README.md). Imports numpy on the first greedy request."""
        return int(self.logits(index).argmax())

    def logits(self, index: int = -1) -> np.ndarray:
        """Batch row `index`'s logits: a view of llama.cpp's buffer, valid until the next decode."""
        import numpy as np  # cached after the first: a dict lookup per token

        logits = llama_cpp.llama_get_logits_ith(self.context.ctx, index)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,))

    def _sample_loop(self, job: Job, samplers: _Samplers) -> None:
        sampling, parser, emit, usage = job.sampling, job.parser, job.emit, job.usage
        limit = output_limit(job, self.n_ctx - len(self.evaluated))
        top = logprobs_wanted(sampling)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        stops = StopScanner(sampling.stop)
        counters, key = METRICS.counters, job.tokens_key
        ctx, smpl, constrained = self.context.ctx, samplers.plain, samplers.grammar
        sample, is_eog, piece = llama_cpp.llama_sampler_sample, self.is_eog, self.piece
        pending: list[TokenLogprob] = []
        finish, stopped = FinishReason.STOP, False
        while True:
            if job.cancelled:
                return
            if constrained is not None:
                token = constrained.sample(ctx)
            elif samplers.greedy:
                token = self.argmax()
            elif samplers.fast is not None:
                token = samplers.fast.sample(self.logits())
            else:
                token = sample(smpl, ctx, -1)
            if samplers.watching:
                token = samplers.watch(token, ctx)
                constrained = samplers.grammar
            if is_eog(token):
                break
            usage.completion_tokens += 1
            counters[key] += 1
            if top >= 0:
                pending.append(self._logprob(token, top))
            text, stopped = stops.feed(decoder.decode(piece(token)))
            if text:
                events = parser.feed(text, pending or None)
                pending = []
                if events:
                    usage.reasoning_tokens += any(
                        type(e) is TextDelta and e.channel is ItemKind.REASONING for e in events
                    )
                    emit(events)
            if stopped:
                break
            if usage.completion_tokens >= limit:
                finish = FinishReason.LENGTH
                break
            if job.shift_keep is not None and shift.due(len(self.evaluated), self.n_ctx):
                keep = shift.kept(job.shift_keep, len(job.tokens))
                usage.shifted_tokens += shift.shift(self.context.memory, 0, self.evaluated, self.n_ctx, keep)
            self._decode([token])
        # Text held back for a possible stop string, or an unfinished UTF-8 sequence, is text.
        tail = "" if stopped else stops.flush() + decoder.decode(b"", final=True)
        events = (parser.feed(tail, pending or None) if tail else []) + parser.finish()
        if finish is FinishReason.STOP and parser.saw_tool_calls:
            finish = FinishReason.TOOL_CALLS
        if usage.shifted_tokens:  # the cells after the hole were computed with what it dropped
            self.forget()
        final = Usage(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage.reasoning_tokens,
            shifted_tokens=usage.shifted_tokens,
        )
        word = stops.reached if finish is FinishReason.STOP else None
        emit([*events, UsageReport(final), Finished(finish, word)])


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` share from their start: what a cache holding `a` keeps for `b`
    (this runtime's own, the scheduler's slots, the draft model's sequences)."""
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    return same


def output_limit(job: Job, room: int) -> int:
    """The most tokens the job may write, `room` being what its context has left after the
    prompt: what it asked for, within that room unless the context shifts (shift.py)."""
    asked = job.sampling.max_tokens
    if asked is None:
        return room  # no limit asked: the context's end is one, shift or not
    return asked if job.shift_keep is not None else min(asked, room)


def logprobs_wanted(sampling: SamplingParams) -> int:
    """How many alternatives each output token's `TokenLogprob` lists; -1: none is made. The
    token ids alone (llama-server's `tokens`) come with their logprob and no alternatives."""
    if sampling.logprobs:
        return sampling.top_logprobs or 0
    return 0 if sampling.token_ids else -1


def needs_numpy(sampling: SamplingParams, grammar: Grammar | None, n_vocab: int = 0) -> bool:
    """Whether the job reads logits through numpy (the greedy argmax, the top k for a chain
    that starts with top-k on a large vocabulary, logprobs, a grammar's mask); a server that
    serves none of these never imports it (bindings.py)."""
    return (
        grammar is not None
        or _greedy(sampling)
        or logprobs_wanted(sampling) >= 0
        or (n_vocab >= FAST_CHAIN_VOCAB and top_k_first(sampling) is not None)
    )


def numpy_loaded() -> bool:
    return "numpy" in sys.modules


def _penalties(sampling: SamplingParams) -> tuple[float, float, float]:
    """Repeat, frequency and presence penalties, 1.0/0/0 when unset (no penalty)."""
    repeat = sampling.repeat_penalty if sampling.repeat_penalty is not None else 1.0
    return repeat, sampling.frequency_penalty or 0.0, sampling.presence_penalty or 0.0


def _greedy(sampling: SamplingParams) -> bool:
    """Whether `_sampler` makes a chain of the greedy sampler alone."""
    repeat, frequency, presence = _penalties(sampling)
    temperature = sampling.temperature if sampling.temperature is not None else DEFAULT_TEMPERATURE
    return (
        temperature <= 0
        and repeat == 1.0
        and not frequency
        and not presence
        and not sampling.logit_bias
        and not samplers.dry_on(sampling)
    )


def top_k_first(sampling: SamplingParams) -> int | None:
    """k when `_sampler`'s chain for the request starts with top-k (nothing before it needs the
    whole vocabulary: no logit bias, penalties, DRY, top-n-sigma or mirostat); None otherwise."""
    repeat, frequency, presence = _penalties(sampling)
    last_n = PENALTY_LAST_N if sampling.repeat_last_n is None else sampling.repeat_last_n
    temperature = sampling.temperature if sampling.temperature is not None else DEFAULT_TEMPERATURE
    top_k = sampling.top_k if sampling.top_k is not None else DEFAULT_TOP_K
    if (
        not temperature > 0  # greedy: no top-k (and the argmax when nothing else runs)
        or top_k <= 0
        or sampling.logit_bias
        or sampling.mirostat in (1, 2)
        or ((repeat != 1.0 or frequency or presence) and last_n)
        or samplers.dry_on(sampling)
        or (sampling.top_n_sigma is not None and sampling.top_n_sigma > 0)
    ):
        return None
    return top_k


class _Samplers:
    """The sampler chain of a job, and the switch to sampling under its grammar.

    Without a grammar there is one chain. With one that applies from the first token, there is
    a `GrammarSampler` from the start. With a reasoning model, the plain chain runs while the
    output is inside the reasoning block, and the grammar from the token after the close tag. A
    model whose prompt leaves the block closed may still open it with its first token: that
    token is drawn from the plain chain, and drawn again under the grammar unless it is the
    open tag.
    """

    __slots__ = ("_first", "_job", "_runtime", "_tail", "fast", "grammar", "greedy", "plain", "watching")

    def __init__(self, runtime: LlamaRuntime, job: Job) -> None:
        self._runtime, self._job = runtime, job
        self.plain: Any = runtime._sampler(job.sampling, job.seed)
        # The plain chain is llama.cpp's greedy sampler alone (stateless): `runtime.argmax`
        # picks its token.
        self.greedy = _greedy(job.sampling)
        # A plain chain that starts with top-k, on a large vocabulary: `fast` gives it the top
        # k of the logits instead of all of them (numpy was imported before the job: needs_numpy).
        self.fast: TopKChain | None = None
        k = top_k_first(job.sampling)
        if k is not None and runtime.n_vocab >= FAST_CHAIN_VOCAB and numpy_loaded():
            from sluicegate.engines.llamacpp.top_k_chain import TopKChain

            self.fast = TopKChain(self.plain, k, runtime.n_vocab)
        self.grammar: GrammarSampler | None = None
        grammar, reasoning = job.grammar, job.reasoning
        if grammar is not None and grammar.holds_reasoning:  # it writes the reasoning: no watch
            reasoning = None
            grammar = grammar.inside_reasoning() if job.in_reasoning else grammar
        self._first = grammar is not None and reasoning is not None and not job.in_reasoning
        self.watching = grammar is not None and reasoning is not None and (job.in_reasoning or self._first)
        self._tail = ""
        if grammar is not None and not self.watching:
            self._constrain(grammar)

    def _constrain(self, grammar: Grammar) -> GrammarSampler:
        runtime, job = self._runtime, self._job
        chain = runtime._sampler(job.sampling, job.seed)
        self.grammar = GrammarSampler(runtime.guidance(), runtime.n_vocab, grammar.lark, chain)
        return self.grammar

    def watch(self, token: int, ctx: Any, index: int = -1) -> int:
        """See a token drawn by the plain chain; switch to the grammar where the answer starts."""
        reasoning, grammar = self._job.reasoning, self._job.grammar
        assert reasoning is not None and grammar is not None
        text = self._runtime.piece(token).decode("utf-8", "replace")
        if self._first:
            self._first = False
            if text.strip() != reasoning.open_tag:  # no reasoning: this token must obey the grammar
                self.watching = False
                return self._constrain(grammar).sample(ctx, index)
            return token
        self._tail = (self._tail + text)[-4 * len(reasoning.close_tag) :]
        if reasoning.close_tag in self._tail:
            self.watching = False
            self._constrain(grammar.after_reasoning())
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.plain)
        if self.grammar is not None:
            self.grammar.free()


BANNED = -100.0  # OpenAI's -100 bans a token: llama.cpp gets -inf, so it never comes out


def logit_bias_sampler(n_vocab: int, biases: dict[int, float]) -> Any:
    """llama.cpp's logit-bias sampler for `biases` (token ids checked against the vocabulary)."""
    entries = (llama_cpp.llama_logit_bias * len(biases))()
    for entry, (token, bias) in zip(entries, biases.items(), strict=True):
        entry.token = token
        entry.bias = -math.inf if bias <= BANNED else bias
    return llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), entries)
