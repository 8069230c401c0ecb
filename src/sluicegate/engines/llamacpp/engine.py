"""The llamacpp engine: GGUF models in-process through llama-cpp-python.

Each engine (one per model instance) owns one llama.cpp context and one worker thread. Loading,
prompt decoding and sampling all happen on that thread; events cross to the event loop through
a batching channel, so the loop never waits on llama.cpp. Without `batching`, a context runs
one sequence, so an instance admits one request at a time (`default_max_concurrency`) and
`parallel = N` builds N instances. With `batching = true`, one context holds `parallel`
sequences that a scheduler (scheduler.py) decodes together, and the instance admits that many
(the default).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import llama_cpp

from sluicegate.core.audio import Sound
from sluicegate.core.embeddings import EmbedInput, EmbedRequest, EmbedResult
from sluicegate.core.errors import EngineFailure, invalid
from sluicegate.core.events import (
    ItemKind,
    RawBatch,
    RawEvent,
    TextDelta,
    UsageReport,
)
from sluicegate.core.request import ChatRequest, ContentPart, Message
from sluicegate.core.rerank import RerankRequest, RerankResult
from sluicegate.core.slots import LORA, N_KEEP
from sluicegate.core.speech import TranscriptEvent, TranscriptionRequest
from sluicegate.engines.base import (
    CHAT_ONLY,
    Capabilities,
    Engine,
    LoadConfig,
    ModelInfo,
    ProgressCallback,
    Task,
    fim_unsupported,
)
from sluicegate.engines.heard_transcript import check_heard, heard_transcript
from sluicegate.engines.llamacpp import slot_files
from sluicegate.engines.llamacpp.call_grammar import forced_grammar
from sluicegate.engines.llamacpp.channel import Channel
from sluicegate.engines.llamacpp.completion import (
    FimTokens,
    echoed,
    fim_tokens,
    prompt_tokens,
    refuse_unservable,
)
from sluicegate.engines.llamacpp.context import choose_context
from sluicegate.engines.llamacpp.fallback_templates import fallback_template
from sluicegate.engines.llamacpp.gguf_info import (
    POOLING_MEAN,
    POOLING_RANK,
    POOLING_TYPES,
    GGUFInfo,
    read_gguf_info,
)
from sluicegate.engines.llamacpp.grammar import Grammar, request_grammar
from sluicegate.engines.llamacpp.lora import Adapters, parse_scales
from sluicegate.engines.llamacpp.overflow import (
    TRUNCATED_HEADER,
    Policy,
    answer_room,
    fit,
    policy_value,
    too_long,
)
from sluicegate.engines.llamacpp.pooled import embedding_inputs, normalised, rerank_inputs, run_pooled
from sluicegate.engines.llamacpp.prediction import prediction_tokens
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime, Vocabulary, needs_numpy, numpy_loaded
from sluicegate.engines.llamacpp.scheduler import BatchScheduler
from sluicegate.engines.llamacpp.sequence import Sequence
from sluicegate.engines.llamacpp.settings import LlamaCppSettings, parse_settings
from sluicegate.engines.llamacpp.speculative import ModelDrafter, NgramDrafter, Speculator, check_vocabularies
from sluicegate.engines.llamacpp.template import render_request
from sluicegate.engines.llamacpp.tokenizer import check_ids, pieces, tokenize
from sluicegate.engines.llamacpp.vision import (
    MARKER,
    Media,
    MediaPrompt,
    Projector,
    find_projector,
    projector_senses,
)
from sluicegate.engines.slots import SlotKind, SlotResult
from sluicegate.observe.metrics import METRICS
from sluicegate.parsing import PlainText, detect_reasoning, detect_tool_format, new_parser

if TYPE_CHECKING:  # numpy where first used: a chat server never needs it (bindings.py)
    import numpy as np

log = logging.getLogger(__name__)
TOKENS_METRIC = "sluicegate_llamacpp_tokens_generated_total"
MIB = 1 << 20
EMBEDDINGS_ONLY: frozenset[Task] = frozenset({"embeddings"})
RERANK_ONLY: frozenset[Task] = frozenset({"rerank"})
HEARS: frozenset[Task] = frozenset({"chat", "transcription"})  # a projector with an audio encoder
DEFAULT_SEQUENCES = 4  # with batching, when `parallel` is unset and the KV budget allows


def _shift_keep(base: int | None, request: ChatRequest) -> int | None:
    """What a context shift keeps for this request (shift.py): the BOS (`base`), and the
    request's `n_keep` more (llama-server's; -1: the whole prompt); None: no shift."""
    n_keep = request.extra.get(N_KEEP)
    if base is None or not isinstance(n_keep, int) or not n_keep:
        return base
    return -1 if n_keep < 0 else base + n_keep


def llama_seed(seed: int) -> int:
    """A request's int64 seed as llama.cpp's uint32 one. Every seed maps to a fixed sampler seed
    (the same request, the same reply), never to 0xFFFFFFFF, which llama.cpp reads as "random"."""
    return seed % 0xFFFFFFFF


class LlamaCppEngine(Engine):
    kind = "llamacpp"
    needs_load = True
    holds_weights = True
    reads_pixels = True
    heavy_checks = True  # `check` runs in a worker thread: under `_checking`, beside the worker
    default_max_concurrency: ClassVar[int] = 1

    def __init__(self, model_id: str, settings: LlamaCppSettings) -> None:
        super().__init__(model_id)
        self.settings = settings
        self.gguf: GGUFInfo = read_gguf_info(settings.path)
        self.template = settings.chat_template or self.gguf.chat_template
        # A GGUF without a template: its architecture's format (llama.cpp's built-ins), or for a
        # base model a plain transcript, with the stop strings that end its answer.
        fallback = fallback_template(self.gguf.architecture, base_model=self.gguf.finetune is None)
        self.prompt_template = self.template or fallback.source
        self._template_stops = fallback.stops if self.template is None else ()
        self.tool_format = settings.tool_call_format or detect_tool_format(
            self.template, self.gguf.architecture
        )
        self.reasoning = settings.reasoning if settings.reasoning_set else detect_reasoning(self.template)
        # The thinking switch of a request that sets no effort: llama.cpp passes it on by default.
        self.thinking = settings.thinking if settings.thinking is not None else self.reasoning is not None
        # An embedding model: said so by the config, or by a pooling type (mean, cls, last) in the GGUF.
        self.pooling: int | None = None
        # A reranker: said so by the config, or by rank pooling in the GGUF.
        if settings.rerank if settings.rerank is not None else self.gguf.pooling == POOLING_RANK:
            self.pooling = POOLING_RANK
        elif settings.embedding or (settings.embedding is None and self.gguf.pooling in POOLING_TYPES):
            self.pooling = self.gguf.pooling if self.gguf.pooling in POOLING_TYPES else POOLING_MEAN
        # A projector: the config's, or an `mmproj*.gguf` beside the model; and what it takes.
        self.mmproj: Path | None = None
        if self.pooling is None:
            self.mmproj = settings.mmproj or find_projector(settings.path)
        self._sees, self._hears = projector_senses(self.mmproj) if self.mmproj else (False, False)
        # The most a load may ask for (listed as the model's maximum), and what it loads with.
        self.context = choose_context(self.gguf, settings.context_length, settings.kv_cache_budget_mib)
        self.context_length = self.context.length
        # With batching: `parallel` sequences of one context, each of `context_length`.
        self.batching = settings.batching and self.pooling is None
        if self.batching:
            self.parallel = 1
            self.sequences = settings.parallel or self._default_sequences()
        else:
            self.parallel = settings.parallel or 1
            self.sequences = 1
        self._scheduler: BatchScheduler | None = None
        # LoRA adapters (lora.py): the scales of requests that give none (`POST /lora-adapters`).
        self._lora_scales = tuple(file.scale for file in settings.lora)
        self._adapters: Adapters | None = None
        self._load_context_length: int | None = None  # a load config's or a JIT request's
        self._thinking_switch = self.template is not None and "enable_thinking" in self.template
        self._runtime: LlamaRuntime | None = None
        self._draft: LlamaRuntime | None = None  # the draft model, with `draft_model`
        self._shift_keep: int | None = None  # with `context_shift`, once loaded (shift.py)
        self._vocabulary: Vocabulary | None = None  # the tokenizer alone, while not loaded
        self._eog: list[int] | None = None  # end-of-generation token ids (`ignore_eos`)
        self._executor: ThreadPoolExecutor | None = None
        # What `check` worked out, for `generate`: one per request checked and not yet run (a few
        # at once with batching), the oldest freed beyond `sequences + 1`.
        self._prepared: dict[int, _Prepared] = {}
        self._prepared_lock = threading.Lock()  # `check`'s thread sets it, `generate` takes it
        # Held by a check for its whole run: what it uses (the tokenizer alone, the counting
        # projector, the loaded model) is freed only under it, never under a running check.
        self._checking = threading.Lock()
        # The projector on the tokenizer alone, to count images' tokens before a load.
        self._counting: Projector | None = None
        self._fim: tuple[FimTokens | None, str] | None = None  # from the vocabulary, once asked
        self._tokens_key = METRICS.key(TOKENS_METRIC, model=model_id)

    def _default_sequences(self) -> int:
        """As many full contexts as the KV-cache budget holds, between 1 and DEFAULT_SEQUENCES."""
        one = self.context.cache_bytes(1, self.settings.batch_size)
        if not one:
            return 1
        return max(1, min(DEFAULT_SEQUENCES, self.context.budget_mib * MIB // one))

    def _n_ubatch(self) -> int:
        """The micro-batch the context loads with (a windowed layer keeps one beyond the window)."""
        return self.context_length if self.pooling is not None else self.settings.batch_size

    def default_concurrency(self) -> int:
        return self.sequences if self.batching else self.default_max_concurrency

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> LlamaCppEngine:
        return cls(table["id"], parse_settings(table, base_dir))

    def tasks(self) -> frozenset[Task]:
        if self.pooling is None:
            return HEARS if self._hears else CHAT_ONLY  # a model that hears also transcribes
        return RERANK_ONLY if self.pooling == POOLING_RANK else EMBEDDINGS_ONLY

    def check_transcription(self, words: bool) -> None:
        check_heard(self.model_id, words)

    def transcribe(self, request: TranscriptionRequest) -> AsyncIterator[TranscriptEvent]:
        """Through the audio projector: the model asked to write down what it hears."""
        if not self._hears:
            return super().transcribe(request)
        return heard_transcript(self, request)

    def info(self) -> ModelInfo:
        gguf = self.gguf
        reasoning = self.reasoning is not None
        options = ["off", "on"] if reasoning and self._thinking_switch else ["on"] if reasoning else []
        embedding = self.pooling is not None
        return ModelInfo(
            id=self.model_id,
            engine=self.kind,
            created=self.created,
            owned_by=gguf.organization or "local",
            display_name=gguf.name,
            context_length=self.context_length,
            capabilities=Capabilities(
                completion=not embedding,
                # The vocabulary's answer once it was asked (a FIM request), else the header's.
                fill_in_middle=not embedding
                and (self.gguf.has_fim if self._fim is None else self._fim[0] is not None),
                tool_use=self.template is not None and gguf.supports_tools and not embedding,
                reasoning=reasoning,
                vision=self._sees,
                audio=self._hears,
                logprobs=True,
                reasoning_options=options,
                reasoning_default=("off" if self.thinking is False else "on") if reasoning else None,
            ),
            details={
                "type": "embedding" if embedding else "llm",
                "publisher": gguf.organization or "local",
                "architecture": gguf.architecture,
                "quantization": {"name": gguf.quantization, "bits_per_weight": gguf.bits_per_weight}
                if gguf.quantization
                else None,
                "size_bytes": gguf.size_bytes,
                "params_string": gguf.params_string,
                "format": "gguf",
                "path": str(gguf.path),
                "mmproj": str(self.mmproj) if self.mmproj is not None else None,
                "description": gguf.description,
                "context": self.context.details(self.sequences, self._n_ubatch()),
            },
        )

    # --- requests --------------------------------------------------------------------------

    def render_prompt(
        self, request: ChatRequest, messages: list[Message] | None = None, *, generation_prompt: bool = True
    ) -> str:
        """The prompt text this engine decodes for the request (`sluicegate models render`)."""
        return render_request(
            self.prompt_template,
            request,
            messages,
            bos_token=self.gguf.bos_token,
            eos_token=self.gguf.eos_token,
            add_bos=self.gguf.add_bos,
            media_marker=MARKER if self.mmproj is not None else None,
            reasoning=self.reasoning,
            thinking=self.thinking,
            generation_prompt=generation_prompt,
        )

    def _tokenize(self, text: str) -> list[int]:
        """With the loaded model's vocabulary, or before the load with the tokenizer alone."""
        if self._runtime is not None:
            return self._runtime.tokenize(text)
        return self._vocab().tokenize(text)

    def _tokenizer(self) -> Any:
        """The llama.cpp model whose vocabulary tokenizes: the loaded one, or the tokenizer alone."""
        if self._runtime is not None:
            return self._runtime.model
        if self._vocabulary is None:
            self._vocabulary = Vocabulary(self.settings.path)
        return self._vocabulary.model

    # --- the tokenizer and the template, for llama-server's endpoints ------------------------

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int] | None:
        return tokenize(self._tokenizer(), text, add_special=add_special, parse_special=parse_special)

    def token_pieces(self, tokens: list[int]) -> list[bytes] | None:
        check_ids(tokens, self.gguf.vocab_size, "tokens")
        return pieces(self._tokenizer().vocab, tokens)

    def apply_template(self, request: ChatRequest, *, generation_prompt: bool = True) -> str | None:
        return self.render_prompt(request, generation_prompt=generation_prompt)

    def chat_template(self) -> str | None:
        return self.prompt_template

    # --- text completions ------------------------------------------------------------------

    def _fim_tokens(self) -> tuple[FimTokens | None, str]:
        if self._fim is None:
            self._fim = fim_tokens(self._tokenizer().vocab)
        return self._fim

    def check_completion(self, request: ChatRequest) -> None:
        """The base checks, FIM by the vocabulary itself, and what this engine cannot add."""
        prompt = request.prompt
        assert prompt is not None
        if prompt.fill_in_middle:
            fim, missing = self._fim_tokens()
            if fim is None:
                raise fim_unsupported(self.model_id, missing)
        super().check_completion(request)
        refuse_unservable(prompt, request.sampling, self.model_id, self.gguf.vocab_size)

    def _completion_tokens(self, request: ChatRequest) -> list[int]:
        """The prompt's tokens as llama-server lays them out (completion.py)."""
        assert request.prompt is not None
        asked = request.sampling.max_tokens
        return prompt_tokens(
            self._tokenizer(),
            self._fim_tokens()[0] if request.prompt.fill_in_middle else None,
            request.prompt,
            n_batch=self.settings.batch_size,
            n_ctx=self._limit(request),
            n_predict=-1 if asked is None else asked,
        )

    def _check_completion_length(self, request: ChatRequest) -> list[int]:
        tokens = self._completion_tokens(request)
        n_ctx = self._limit(request)
        if len(tokens) >= n_ctx:
            raise too_long(len(tokens), n_ctx, self.model_id, param="prompt")
        return tokens

    def _resolve_bias_text(self, request: ChatRequest) -> None:
        """llama-server's `logit_bias` keyed by text: every token of the text (tokenized as
        llama-server does, no special tokens) gets the bias. New dicts: `n` choices share one."""
        sampling = request.sampling
        if not sampling.logit_bias_text and not sampling.ignore_eos:
            return
        resolved = dict(sampling.logit_bias)
        for text, bias in sampling.logit_bias_text.items():
            for token in self.tokenize(text, add_special=False, parse_special=False) or ():
                resolved[token] = bias
        if sampling.ignore_eos:  # as llama-server does it: every end-of-generation token banned
            resolved.update(dict.fromkeys(self._end_tokens(), -math.inf))
        sampling.logit_bias, sampling.logit_bias_text, sampling.ignore_eos = resolved, {}, False

    def _end_tokens(self) -> list[int]:
        """The vocabulary's end-of-generation tokens (looked up once: every id is asked)."""
        if self._eog is None:
            vocab = self._tokenizer().vocab
            self._eog = [t for t in range(self.gguf.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        return self._eog

    def _policy(self, request: ChatRequest) -> Policy:
        value = request.options.context_overflow
        return self.settings.context_overflow if value is None else policy_value(value, "context_overflow")

    def check(self, request: ChatRequest) -> None:
        with self._checking:
            self._check(request)

    def _check(self, request: ChatRequest) -> None:
        self._resolve_bias_text(request)
        super().check(request)
        check_ids(list(request.sampling.logit_bias), self.gguf.vocab_size, "logit_bias")
        slot_files.pinned(request.extra, self.sequences if self.batching else 1)  # `id_slot`
        self._request_lora(request)
        if self.pooling is not None:
            message = (
                f"Model {self.model_id!r} is a reranker; use POST /v1/rerank."
                if self.pooling == POOLING_RANK
                else f"Model {self.model_id!r} is an embedding model; use POST /v1/embeddings."
            )
            raise invalid(message, param="model", code="model_not_supported")
        if request.prompt is not None and request.prompt.media:
            self._check_media_completion(request)
            return
        if request.prompt is not None:
            laid_out = self._check_completion_length(request)
            grammar = request_grammar(request)  # a raw prompt: no family markup
            self._prepare(_Prepared(request, "", laid_out, grammar))
            return
        grammar = forced_grammar(request, self.tool_format, self.model_id, self.reasoning)
        policy = self._policy(request)
        prompt = self.render_prompt(request)
        pictures = self._pictures(request.messages)
        if pictures and prompt.count(MARKER) != len(pictures):
            raise invalid(
                f"A message's text contains libmtmd's image marker {MARKER!r}; it cannot be sent "
                "with images.",
                code="invalid_image",
            )
        tokens: list[int] | None = None
        media: MediaPrompt | None = None
        n_ctx = self._limit(request)
        if pictures:  # counted exactly, images included, so an overflow is refused here too
            media, tokens = self._media(prompt, pictures)
        # A prompt cannot have more tokens than bytes: only a long one needs counting here.
        elif len(prompt.encode("utf-8")) >= n_ctx:
            tokens = self._tokenize(prompt)
        if tokens is not None and len(tokens) >= n_ctx:
            if media is not None:
                media.free()
                media = None
            if policy == "error":
                raise too_long(len(tokens), n_ctx, self.model_id)
            budget = n_ctx - answer_room(n_ctx, request.sampling.max_tokens)
            fitted = fit(request.messages, policy, budget, lambda kept: self._count(request, kept))
            if fitted is None:
                raise too_long(len(tokens), n_ctx, self.model_id)
            log.info(
                "%s: %s dropped %d of %d messages (%d -> %d prompt tokens)",
                self.model_id,
                policy,
                fitted.dropped,
                len(request.messages),
                len(tokens),
                len(fitted.tokens),
            )
            request.response_headers[TRUNCATED_HEADER] = str(fitted.dropped)
            prompt, tokens = self.render_prompt(request, fitted.messages), fitted.tokens
            pictures = self._pictures(fitted.messages)
        if pictures and media is None:  # counted before the load, or trimmed: the worker tokenizes
            tokens = None
        self._prepare(_Prepared(request, prompt, tokens, grammar, pictures, media))

    def _check_media_completion(self, request: ChatRequest) -> None:
        """A raw prompt with images (llama-server's `multimodal_data`): its text and images
        through the projector as a chat prompt's are (BOS and special tokens as llama-server
        reads it), counted exactly, so an overflow is a 400 here."""
        raw = request.prompt
        assert raw is not None and isinstance(raw.text, str)  # the dialect let only text through
        pictures = self._media_pictures(raw.media)
        if raw.text.count(MARKER) != len(pictures):
            raise invalid(
                f"The prompt has {raw.text.count(MARKER)} media markers ({MARKER!r}) for {len(pictures)} "
                "items of 'multimodal_data': one marker stands where each goes.",
                param="prompt",
                code="invalid_image",
            )
        media, tokens = self._media(raw.text, pictures)
        n_ctx = self._limit(request)
        if len(tokens) >= n_ctx:
            if media is not None:
                media.free()
            raise too_long(len(tokens), n_ctx, self.model_id, param="prompt")
        counted = tokens if media is not None else None  # None: counted before the load, the worker tokenizes
        self._prepare(_Prepared(request, raw.text, counted, request_grammar(request), pictures, media))

    def _media_pictures(self, parts: list[ContentPart]) -> list[Media]:
        return self._pictures([Message(role="user", content=parts)])

    def _prepare(self, prepared: _Prepared) -> None:
        """Keep what `check` found for `generate` (a request checked and never run leaves its
        image chunks to a later check to free)."""
        with self._prepared_lock:
            earlier = self._prepared.pop(id(prepared.request), None)  # the same request, or its id reused
            if earlier is not None:
                earlier.free()
            self._prepared[id(prepared.request)] = prepared
            while len(self._prepared) > self.sequences + 1:
                self._prepared.pop(next(iter(self._prepared))).free()

    def _take_prepared(self, request: ChatRequest) -> _Prepared | None:
        """What `check` prepared for `request` (None: it was not, or it was freed since)."""
        with self._prepared_lock:
            prepared = self._prepared.get(id(request))
            if prepared is None or prepared.request is not request:
                return None
            del self._prepared[id(request)]
            return prepared

    def _projector(self) -> Projector:
        """The projector that counts a prompt's image tokens: the loaded model's, or before a
        load one on the tokenizer alone (kept, like the tokenizer, until the model loads)."""
        runtime = self._runtime
        if runtime is not None and runtime.projector is not None:
            return runtime.projector
        assert self.mmproj is not None
        if self._counting is None:
            try:
                self._counting = Projector(
                    self.mmproj, self._vocab().model.model, threads=1, use_gpu=False, warmup=False
                )
            except ValueError as exc:
                raise EngineFailure(str(exc), code="model_load_failed") from exc
        return self._counting

    def _media(self, prompt: str, pictures: list[Media]) -> tuple[MediaPrompt | None, list[int]]:
        """The prompt's tokens with its images; and the tokenized prompt itself when the loaded
        model's projector made it (the worker decodes it then), else None (it was freed)."""
        projector = self._projector()
        media = projector.tokenize(prompt, pictures)
        if self._runtime is not None and projector is self._runtime.projector:
            return media, media.tokens
        media.free()
        return None, media.tokens

    def _count(self, request: ChatRequest, messages: list[Message] | None = None) -> list[int]:
        """The tokens of the prompt for `messages` (default: the request's), images included."""
        prompt = self.render_prompt(request, messages)
        pictures = self._pictures(request.messages if messages is None else messages)
        if not pictures:
            return self._tokenize(prompt)
        media, tokens = self._media(prompt, pictures)
        if media is not None:
            media.free()
        return tokens

    def _pictures(self, messages: list[Message]) -> list[Media]:
        """The messages' images and audio clips in prompt order, decoded or checked (the turn
        runner did it)."""
        pictures: list[Media] = []
        for message in messages:
            if isinstance(message.content, str):
                continue
            for part in message.content:
                if part.type == "image":
                    if part.picture is None:
                        raise invalid(
                            f"Model {self.model_id!r} got an image it cannot read.", code="invalid_image"
                        )
                    pictures.append(part.picture)
                elif part.type == "audio":
                    if part.sound is None:
                        raise invalid(
                            f"Model {self.model_id!r} got audio it cannot hear.", code="invalid_audio"
                        )
                    pictures.append(part.sound)
        return pictures

    def _input_tokens(self, value: EmbedInput) -> list[int]:
        return self._tokenize(value) if isinstance(value, str) else self._mixed_tokens(value)

    def _mixed_tokens(self, value: list[int] | list[int | str]) -> list[int]:
        """Token ids as they are; a text among them tokenized where it stands (special tokens
        only when it comes first), as llama-server's `tokenize_mixed`."""
        out: list[int] = []
        for index, piece in enumerate(value):
            if not isinstance(piece, str):
                out.append(piece)
            elif index == 0:
                out += self._tokenize(piece)
            else:
                out += self.tokenize(piece, add_special=False, parse_special=True) or []
        return out

    def _vocab(self) -> Vocabulary:
        if self._vocabulary is None:
            self._vocabulary = Vocabulary(self.settings.path)
        return self._vocabulary

    def _limit(self, request: ChatRequest) -> int:
        """The context this request may fill: the loaded one (or the one a load will give),
        or less if the request caps it."""
        runtime = self._runtime
        if runtime is not None:
            return _context(runtime, request)
        loaded = self._load_context_length or self.context_length
        cap = request.options.context_length
        return loaded if cap is None else min(cap, loaded)

    def count_tokens(self, request: ChatRequest) -> int | None:
        """The rendered prompt's tokens: by the loaded model, or its tokenizer alone (with its
        projector for images). Under `_checking`: it may run in a worker thread too."""
        with self._checking:
            return len(self._count(request))

    def configure_load(self, config: LoadConfig) -> None:
        self._load_context_length = config.context_length

    async def load(self, on_progress: ProgressCallback) -> None:
        settings = self.settings
        context_length = self._load_context_length or self.context_length
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llamacpp-{self.model_id}")
        loop = asyncio.get_running_loop()

        def build() -> LlamaRuntime:
            return LlamaRuntime(
                settings.path,
                context_length=context_length,
                n_gpu_layers=settings.n_gpu_layers,
                threads=settings.threads,
                batch_size=settings.batch_size,
                flash_attention=settings.flash_attention,
                on_progress=on_progress,
                repack=settings.repack,
                pooling=self.pooling,
                sequences=self.sequences,
                mmproj=self.mmproj,
            )

        log.info("loading %s: %s", self.model_id, self.context.describe(self.sequences, self._n_ubatch()))
        try:
            self._runtime = await loop.run_in_executor(self._executor, build)
        except ValueError as exc:  # llama-cpp-python's way of saying the load failed
            raise EngineFailure(
                f"llama.cpp could not load {settings.path}: {exc}", code="model_load_failed"
            ) from exc
        self._shift_keep = self._context_shift(self._runtime)
        if settings.lora:
            try:
                self._adapters = await loop.run_in_executor(
                    self._executor, Adapters, self._runtime.model.model, settings.lora
                )
            except BaseException:
                await self.unload()
                raise
        if self.batching:
            # Always one: without `speculative`, a request's `prediction` is what drafts.
            try:
                speculator = await loop.run_in_executor(
                    self._executor, self._speculator, self._runtime, context_length
                )
            except BaseException:
                await self.unload()
                raise
            self._scheduler = BatchScheduler(
                self._runtime,
                stream_interval=settings.stream_interval_ms / 1000,
                speculator=speculator,
                adapters=self._adapters,
            )
            self._executor.submit(self._scheduler.run)  # the worker thread is the scheduler's now
        await asyncio.to_thread(self._close_vocabulary())  # the loaded model tokenizes now

    def _context_shift(self, runtime: LlamaRuntime) -> int | None:
        """The tokens a context shift keeps (the BOS, if the model adds one), or None: the
        model shifts no context. As llama-server, a projector or a memory that cannot move
        its cells turns `context_shift` off, with a warning."""
        if not self.settings.context_shift:
            return None
        if runtime.projector is not None:
            log.warning(
                "%s: context_shift is off: a model with a projector cannot shift its context", self.model_id
            )
            return None
        if not llama_cpp.llama_memory_can_shift(runtime.context.memory):
            log.warning("%s: context_shift is off: this model's memory cannot shift", self.model_id)
            return None
        return int(bool(runtime.model.add_bos_token()))

    def _speculator(self, target: LlamaRuntime, context_length: int) -> Speculator:
        """The drafts' source: n-gram lookup, or the draft model (loaded here, on the worker
        thread, with the target's context and threads, one KV stream per slot)."""
        settings, spec = self.settings, self.settings.speculative
        if spec is None:
            return Speculator(None, None, self.model_id, target.sequences)
        if spec.kind == "ngram":
            return Speculator(spec, NgramDrafter(spec, target.sequences), self.model_id, target.sequences)
        assert spec.draft_model is not None
        try:
            draft = LlamaRuntime(
                spec.draft_model,
                context_length=context_length,
                n_gpu_layers=settings.n_gpu_layers,
                threads=settings.threads,
                batch_size=settings.batch_size,
                flash_attention=settings.flash_attention,
                on_progress=lambda _: None,
                repack=settings.repack,
                sequences=target.sequences,
            )
        except ValueError as exc:
            raise EngineFailure(
                f"llama.cpp could not load the draft model {spec.draft_model}: {exc}",
                code="model_load_failed",
            ) from exc
        try:
            check_vocabularies(target, draft)
        except BaseException:
            draft.close()
            raise
        self._draft = draft
        return Speculator(spec, ModelDrafter(spec, draft), self.model_id, target.sequences)

    def _close_vocabulary(self) -> Callable[[], None]:
        """Detach the tokenizer alone and the counting projector; the returned call frees them
        (off the loop: it waits for a running check)."""
        counting, self._counting = self._counting, None
        vocabulary, self._vocabulary = self._vocabulary, None

        def free() -> None:
            with self._checking:
                if counting is not None:
                    counting.close()
                if vocabulary is not None:
                    vocabulary.close()

        return free

    def _between_checks(self, close: Callable[[], None]) -> Callable[[], None]:
        def closed() -> None:
            with self._checking:
                close()

        return closed

    async def unload(self) -> None:
        runtime, self._runtime = self._runtime, None
        draft, self._draft = self._draft, None
        adapters, self._adapters = self._adapters, None
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.stop()  # its loop ends; `close` below runs after it on the same thread
        if self._executor is not None:
            # On the worker thread, after whatever it is finishing: never under a running decode.
            for part in (draft, adapters, runtime):  # adapters before the weights they belong to
                if part is not None:
                    await asyncio.get_running_loop().run_in_executor(
                        self._executor, self._between_checks(part.close)
                    )

    async def aclose(self) -> None:
        await self.unload()
        await asyncio.to_thread(self._close_vocabulary())
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        runtime, executor = self._runtime, self._executor
        if runtime is None or executor is None:
            raise EngineFailure(f"model {self.model_id!r} is not loaded", code="model_not_loaded")
        prepared = self._take_prepared(request)
        if prepared is None and request.prompt is not None and request.prompt.media:
            assert isinstance(request.prompt.text, str)
            pictures = self._media_pictures(request.prompt.media)  # the worker tokenizes them
            prepared = _Prepared(
                request, request.prompt.text, grammar=request_grammar(request), pictures=pictures
            )
        elif prepared is None and request.prompt is not None:
            laid_out = self._check_completion_length(request)
            prepared = _Prepared(request, "", laid_out, request_grammar(request))
        elif prepared is None:
            prepared = _Prepared(
                request,
                self.render_prompt(request),
                grammar=forced_grammar(request, self.tool_format, self.model_id, self.reasoning),
                pictures=self._pictures(request.messages),
            )
        prompt, tokens, grammar, pictures = (
            prepared.prompt,
            prepared.tokens,
            prepared.grammar,
            prepared.pictures,
        )
        loop = asyncio.get_running_loop()
        if grammar is not None and not runtime.guidance_ready:
            # The grammar engine's vocabulary view, built by the first structured request (not
            # at load: ~95 MiB for a 262k vocabulary), on a thread of its own: not the worker,
            # where every sequence would stall for it; only this request waits.
            await asyncio.to_thread(runtime.guidance)
        if not numpy_loaded() and needs_numpy(request.sampling, grammar, runtime.n_vocab):
            # Imported by the first request that reads logits through it (~0.1-0.3 s), on a
            # thread of its own: on the worker every sequence would stall for it.
            await asyncio.to_thread(importlib.import_module, "numpy")
        scheduler = self._scheduler
        channel: Channel[RawEvent] = Channel(loop, scheduler.wakeups if scheduler else None)
        seed = request.sampling.seed if request.sampling.seed is not None else self.settings.seed
        raw = request.prompt
        in_reasoning = (
            raw is None
            and self.reasoning is not None
            and (self.reasoning.opened_by(prompt) or request.continues_reasoning)
        )
        if raw is not None and raw.echo:  # the prompt as it was given, before what follows it
            text = raw.text if isinstance(raw.text, str) else echoed(runtime.model.vocab, raw.text)
            if text:
                yield TextDelta(ItemKind.MESSAGE, text)
        sampling = request.sampling
        if self._template_stops and raw is None:  # a completion has no template, nor its stops
            sampling = replace(sampling, stop=[*sampling.stop, *self._template_stops])
        job = Job(
            tokens=tokens or [],
            sampling=sampling,
            seed=llama_seed(seed) if seed is not None else random.getrandbits(31),
            # A completion's output is text: no reasoning or tool calls are looked for in it.
            parser=PlainText()
            if raw is not None
            else new_parser(
                self.tool_format,
                reasoning=self.reasoning,
                starts_in_reasoning=in_reasoning,
                tools={tool.name: tool.parameters for tool in request.tools},
                continues=request.continue_final,
            ),
            emit=channel.put,
            tokens_key=self._tokens_key,
            grammar=grammar,
            reasoning=self.reasoning if raw is None else None,
            in_reasoning=in_reasoning,
            pictures=pictures,
            media=prepared.media,  # tokenized by `check` with the loaded projector, or None
            # Drafts come from it with batching (the path without does not draft).
            prediction=prediction_tokens(runtime.model, request.prediction)
            if request.prediction and scheduler is not None
            else None,
            shift_keep=_shift_keep(self._shift_keep, request),
        )
        if any(isinstance(p, Sound) for p in pictures):
            job.emit = _with_audio_tokens(job)

        if scheduler is not None:
            sequence = Sequence(
                job,
                prompt,
                cap=request.options.context_length,
                fail=lambda exc: channel.fail(_engine_failure(exc)),
                done=channel.close,
                pin=slot_files.pinned(request.extra, len(scheduler.slots)),
                lora=self._request_lora(request),
            )
            scheduler.submit(sequence)
            try:
                async for batch in channel.batches():
                    # One wake-up's events go on as one: the layers above take one step, and
                    # the client gets one write (several tokens with `stream_interval_ms`).
                    yield batch[0] if len(batch) == 1 else RawBatch(batch)
            finally:
                job.cancelled = True  # the scheduler drops the sequence, and its cells, next step
                scheduler.wake()
            return

        def work() -> None:
            try:
                if not job.tokens:
                    job.tokens = runtime.prompt_tokens(job, prompt)
                limit = _context(runtime, request)
                if len(job.tokens) >= limit:
                    raise EngineFailure(
                        f"The prompt is {len(job.tokens)} tokens, more than the context length "
                        f"({limit}) of model {self.model_id!r}.",
                        code="context_length_exceeded",
                    )
                if limit < runtime.n_ctx:  # a per-request cap: prompt and output stay within it
                    room = limit - len(job.tokens)
                    asked = job.sampling.max_tokens
                    job.sampling = replace(
                        job.sampling, max_tokens=room if asked is None else min(asked, room)
                    )
                adapters = self._adapters
                if adapters is not None and adapters.apply(runtime.context.ctx, self._request_lora(request)):
                    runtime.forget()  # the cache was computed under other scales
                runtime.generate(job)
            except BaseException as exc:
                runtime.forget()  # the KV cache may be half-written
                channel.fail(_engine_failure(exc))
            finally:
                job.free()
                channel.close()

        loop.run_in_executor(executor, work)
        try:
            async for batch in channel.batches():
                for event in batch:
                    yield event
        finally:
            job.cancelled = True  # the worker stops before its next token

    def _request_lora(self, request: ChatRequest) -> tuple[float, ...]:
        """The LoRA scales a request runs with: its own `lora`, else the model's current ones."""
        asked = request.extra.get(LORA)
        if asked is None or not self.settings.lora:  # no adapters: nothing to scale (llama-server)
            return self._lora_scales
        return parse_scales(asked, len(self.settings.lora))

    def lora_adapters(self) -> list[tuple[Path, float]]:
        """llama-server's `GET /lora-adapters`: each adapter's file and current scale."""
        return [(file.path, scale) for file, scale in zip(self.settings.lora, self._lora_scales, strict=True)]

    def set_lora_scales(self, body: object) -> None:
        """`POST /lora-adapters`: the scales of requests that give none from now on."""
        self._lora_scales = parse_scales(body, len(self.settings.lora), param="body")

    def slot_count(self) -> int | None:
        """llama-server's slots are the scheduler's (engines/slots.py): only with batching."""
        return len(self._scheduler.slots) if self._scheduler is not None else None

    async def slot_action(self, slot: int, kind: SlotKind, path: Path | None) -> SlotResult:
        scheduler = self._scheduler
        if scheduler is None:
            raise EngineFailure(
                f"model {self.model_id!r} is not loaded with batching", code="model_not_loaded"
            )
        return await slot_files.run(scheduler, slot, kind, path, self._lora_scales)

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        if request.dimensions is not None and request.dimensions > self.gguf.embedding_length:
            raise invalid(
                f"Model {self.model_id!r} makes embeddings of {self.gguf.embedding_length} dimensions; "
                f"'dimensions' cannot be {request.dimensions}.",
                param="dimensions",
            )
        inputs = embedding_inputs(
            request, self._input_tokens, self.gguf.vocab_size, self.context_length, self.model_id
        )
        outputs, tokens = await self._pooled(lambda _runtime: inputs)
        return EmbedResult([normalised(v, request.dimensions) for v in outputs], tokens)

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """A reranker's scores: its pooled output's first value for each document."""
        template, limit, model_id = self.gguf.rerank_template, self.context_length, self.model_id
        outputs, tokens = await self._pooled(
            lambda runtime: rerank_inputs(request, runtime.model, template, limit, model_id)
        )
        return RerankResult([float(v[0]) for v in outputs], tokens)

    async def _pooled(
        self, inputs: Callable[[LlamaRuntime], Iterator[list[int]]]
    ) -> tuple[list[np.ndarray], int]:
        runtime, executor = self._runtime, self._executor
        if runtime is None or executor is None:
            raise EngineFailure(f"model {self.model_id!r} is not loaded", code="model_not_loaded")
        return await run_pooled(runtime, executor, inputs)


@dataclass(slots=True)
class _Prepared:
    """A chat or completion request as `check` prepared it: its prompt, and its tokens when
    counting them was needed (with images: the prompt tokenized through the projector)."""

    request: ChatRequest
    prompt: str
    tokens: list[int] | None = None
    grammar: Grammar | None = None
    pictures: list[Media] = field(default_factory=list)
    media: MediaPrompt | None = None

    def free(self) -> None:
        if self.media is not None:
            self.media.free()
            self.media = None


def _with_audio_tokens(job: Job) -> Callable[[list[RawEvent]], None]:
    """The job's `emit`, with the prompt's audio tokens in every usage it reports: the runtime
    counts the prompt, and the media prompt knows which of its tokens are audio."""
    emit = job.emit

    def counted(events: list[RawEvent]) -> None:
        media = job.media
        if media is not None:
            for event in events:
                if isinstance(event, UsageReport):
                    event.usage.audio_tokens = media.audio_tokens
        emit(events)

    return counted


def _context(runtime: LlamaRuntime, request: ChatRequest) -> int:
    """The context this request may fill: the loaded one, or less if the request caps it."""
    loaded: int = runtime.n_ctx
    cap = request.options.context_length
    return loaded if cap is None else min(cap, loaded)


def _engine_failure(exc: BaseException) -> Exception:
    """An exception from the worker thread, as the consumer raises it on the loop."""
    if isinstance(exc, EngineFailure):
        return exc
    return EngineFailure(f"llama.cpp failed: {exc}", code="engine_error")
