"""The llamacpp engine: GGUF models in-process through llama-cpp-python.

Each engine (one per model instance) owns one llama.cpp context and one worker thread. Loading,
prompt decoding and sampling all happen on that thread; events cross to the event loop through
a batching channel, so the loop never waits on llama.cpp. A context runs one sequence, so an
instance admits one request at a time (`default_max_concurrency`); `parallel = N` runs N.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from sluicegate.core.errors import EngineFailure, invalid
from sluicegate.core.events import RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import Capabilities, Engine, LoadConfig, ModelInfo, ProgressCallback
from sluicegate.engines.llamacpp.channel import Channel
from sluicegate.engines.llamacpp.gguf_info import GGUFInfo, read_gguf_info
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime
from sluicegate.engines.llamacpp.settings import MAX_DEFAULT_CONTEXT, LlamaCppSettings, parse_settings
from sluicegate.engines.llamacpp.template import render_chat
from sluicegate.metrics import METRICS
from sluicegate.parsing import OutputParser, detect_reasoning, detect_tool_format

TOKENS_METRIC = "sluicegate_llamacpp_tokens_generated_total"


class LlamaCppEngine(Engine):
    kind = "llamacpp"
    needs_load = True
    default_max_concurrency: ClassVar[int] = 1

    def __init__(self, model_id: str, settings: LlamaCppSettings) -> None:
        super().__init__(model_id)
        self.settings = settings
        self.parallel = settings.parallel
        self.gguf: GGUFInfo = read_gguf_info(settings.path)
        self.template = settings.chat_template or self.gguf.chat_template
        self.tool_format = settings.tool_call_format or detect_tool_format(
            self.template, self.gguf.architecture
        )
        self.reasoning = settings.reasoning if settings.reasoning_set else detect_reasoning(self.template)
        # The most a load may ask for (listed as the model's maximum), and what it loads with.
        self.context_length = settings.context_length or min(
            self.gguf.context_length or MAX_DEFAULT_CONTEXT, MAX_DEFAULT_CONTEXT
        )
        self._load_context_length: int | None = None  # a load config's or a JIT request's
        self._thinking_switch = self.template is not None and "enable_thinking" in self.template
        self._runtime: LlamaRuntime | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._prepared: tuple[ChatRequest, str, list[int] | None] | None = None
        self._tokens_key = METRICS.key(TOKENS_METRIC, model=model_id)

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> LlamaCppEngine:
        return cls(table["id"], parse_settings(table, base_dir))

    def info(self) -> ModelInfo:
        gguf = self.gguf
        reasoning = self.reasoning is not None
        options = ["off", "on"] if reasoning and self._thinking_switch else ["on"] if reasoning else []
        return ModelInfo(
            id=self.model_id,
            engine=self.kind,
            created=self.created,
            owned_by=gguf.organization or "local",
            display_name=gguf.name,
            context_length=self.context_length,
            capabilities=Capabilities(
                tool_use=self.template is not None and gguf.supports_tools,
                reasoning=reasoning,
                vision=False,
                logprobs=True,
                reasoning_options=options,
                reasoning_default="on" if reasoning else None,
            ),
            details={
                "publisher": gguf.organization or "local",
                "architecture": gguf.architecture,
                "quantization": {"name": gguf.quantization, "bits_per_weight": gguf.bits_per_weight}
                if gguf.quantization
                else None,
                "size_bytes": gguf.size_bytes,
                "params_string": gguf.params_string,
                "format": "gguf",
                "path": str(gguf.path),
                "description": gguf.description,
            },
        )

    # --- requests --------------------------------------------------------------------------

    def _render(self, request: ChatRequest) -> str:
        if self.template is None:
            raise invalid(f"Model {self.model_id!r} has no chat template; set `chat_template` in its config.")
        effort = request.reasoning_effort
        thinking = None if effort is None or not self._thinking_switch else effort not in ("off", "none")
        tools = request.tools if request.tool_choice != "none" else []
        return render_chat(
            self.template,
            request.messages,
            tools,
            bos_token=self.gguf.bos_token,
            eos_token=self.gguf.eos_token,
            enable_thinking=thinking,
        )

    def check(self, request: ChatRequest) -> None:
        super().check(request)
        if request.tool_choice not in ("auto", "none"):
            raise invalid(
                f"tool_choice {request.tool_choice!r} cannot be enforced by the llamacpp engine; use 'auto'.",
                param="tool_choice",
                code="unsupported_parameter",
            )
        if request.response_format and request.response_format.get("type", "text") != "text":
            raise invalid(
                "Structured output (response_format) is not supported by the llamacpp engine yet.",
                param="response_format",
                code="unsupported_parameter",
            )
        prompt = self._render(request)
        tokens = None
        runtime = self._runtime
        # A prompt cannot have more tokens than bytes: only a long one needs counting here.
        if runtime is not None and len(prompt.encode("utf-8")) >= (limit := _context(runtime, request)):
            tokens = runtime.tokenize(prompt)
            if len(tokens) >= limit:
                raise invalid(
                    f"The prompt is {len(tokens)} tokens, more than model {self.model_id!r} can take "
                    f"(context length {limit}).",
                    param="messages",
                    code="context_length_exceeded",
                )
        self._prepared = (request, prompt, tokens)

    def count_tokens(self, request: ChatRequest) -> int | None:
        """The rendered prompt's tokens, when the model is loaded (its tokenizer is its vocab)."""
        runtime = self._runtime
        return len(runtime.tokenize(self._render(request))) if runtime is not None else None

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
            )

        try:
            self._runtime = await loop.run_in_executor(self._executor, build)
        except ValueError as exc:  # llama-cpp-python's way of saying the load failed
            raise EngineFailure(
                f"llama.cpp could not load {settings.path}: {exc}", code="model_load_failed"
            ) from exc

    async def unload(self) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is not None and self._executor is not None:
            # On the worker thread, after whatever it is finishing: never under a running decode.
            await asyncio.get_running_loop().run_in_executor(self._executor, runtime.close)

    async def aclose(self) -> None:
        await self.unload()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        runtime, executor = self._runtime, self._executor
        if runtime is None or executor is None:
            raise EngineFailure(f"model {self.model_id!r} is not loaded", code="model_not_loaded")
        prepared = self._prepared
        if prepared is not None and prepared[0] is request:
            _, prompt, tokens = prepared
            self._prepared = None
        else:
            prompt, tokens = self._render(request), None
        loop = asyncio.get_running_loop()
        channel: Channel[RawEvent | _Raise] = Channel(loop)
        seed = request.sampling.seed if request.sampling.seed is not None else self.settings.seed
        job = Job(
            tokens=tokens or [],
            sampling=request.sampling,
            seed=seed if seed is not None else random.getrandbits(31),
            parser=OutputParser(
                tool_format=self.tool_format,
                reasoning=self.reasoning,
                starts_in_reasoning=self.reasoning is not None and self.reasoning.opened_by(prompt),
            ),
            emit=channel.put,
            tokens_key=self._tokens_key,
        )

        def work() -> None:
            try:
                if not job.tokens:
                    job.tokens = runtime.tokenize(prompt)
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
                runtime.generate(job)
            except BaseException as exc:
                runtime.forget()  # the KV cache may be half-written
                channel.put([_Raise(exc)])
            finally:
                channel.close()

        loop.run_in_executor(executor, work)
        try:
            async for batch in channel.batches():
                for event in batch:
                    if isinstance(event, _Raise):
                        raise event.error()
                    yield event
        finally:
            job.cancelled = True  # the worker stops before its next token


def _context(runtime: LlamaRuntime, request: ChatRequest) -> int:
    """The context this request may fill: the loaded one, or less if the request caps it."""
    loaded: int = runtime.n_ctx
    cap = request.options.context_length
    return loaded if cap is None else min(cap, loaded)


class _Raise:
    """An exception from the worker thread, carried across the channel to be raised on the loop."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def error(self) -> Exception:
        if isinstance(self.exc, EngineFailure):
            return self.exc
        return EngineFailure(f"llama.cpp failed: {self.exc}", code="engine_error")
