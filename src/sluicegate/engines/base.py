"""The engine interface. Built-in engines implement it exactly as third-party plugins do.

An engine turns a `ChatRequest` into an async iterator of raw canonical events and stops
promptly when that iterator is cancelled or closed. It knows nothing of HTTP or dialects.
Engines are found through the `sluicegate.engines` entry-point group.

Tasks besides chat are methods of their own, each with its request and result dataclasses in
`core/` (`embed`: `core/embeddings.py`; `rerank`: `core/rerank.py`). An engine declares the
tasks it serves in `tasks()` and implements their methods; the defaults refuse. A route runs a
task with `Model.run`, which admits, queues and loads it just in time like a chat and cancels
it (the awaiting task is cancelled) when the client leaves or the request deadline passes, so
a task method must stop promptly when cancelled (llama.cpp's checks a flag between inputs).
A new task follows the same four steps: a `Task` name, a request/result pair in `core/`, a
method here that refuses by default, and a route that calls it through `Model.run`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from sluicegate.core.embeddings import EmbedRequest, EmbedResult
from sluicegate.core.errors import ConfigError as ConfigError  # part of the engine interface
from sluicegate.core.errors import SluicegateError, invalid
from sluicegate.core.events import RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.core.rerank import RerankRequest, RerankResult
from sluicegate.core.speech import SpeechRequest, TranscriptEvent, TranscriptionRequest, Upload, Voice, Voiced


@dataclass(slots=True)
class Capabilities:
    """What a model can do; routes refuse the rest with a 400 before generating."""

    # Raw-prompt text completion (`ChatRequest.prompt`): no chat template, text out.
    completion: bool = False
    # Fill-in-the-middle: a completion with a suffix (the tokenizer has FIM tokens).
    fill_in_middle: bool = False
    tool_use: bool = True
    reasoning: bool = False
    vision: bool = False
    audio: bool = False  # audio input (Chat's `input_audio`)
    logprobs: bool = False
    reasoning_options: list[str] = field(default_factory=list)  # e.g. ["off", "on"]
    reasoning_default: str | None = None


@dataclass(slots=True)
class ModelInfo:
    id: str
    engine: str
    created: int = field(default_factory=lambda: int(time.time()))
    owned_by: str = "sluicegate"
    display_name: str | None = None
    context_length: int | None = None
    capabilities: Capabilities = field(default_factory=Capabilities)
    # Free-form facts for the model listings: architecture, quantization, size_bytes, ...
    details: dict[str, Any] = field(default_factory=dict)


def fim_unsupported(model_id: str, missing: str = "") -> SluicegateError:
    """The 400 for a fill-in-the-middle request to a model without FIM tokens."""
    detail = f" (its tokenizer has no {missing} token)" if missing else ""
    return invalid(
        f"Model {model_id!r} does not support fill-in-the-middle{detail}; send no 'suffix'.",
        param="suffix",
        code="fill_in_middle_unsupported",
    )


ProgressCallback = Callable[[float], None]
# What a model serves: chat (every dialect, `generate`), embeddings (`embed`: POST /v1/embeddings,
# /api/embed), rerank (`rerank`: POST /v1/rerank), transcription (`transcribe`: POST
# /v1/audio/transcriptions and /translations), speech (`synthesize`: POST /v1/audio/speech).
Task = Literal["chat", "embeddings", "rerank", "transcription", "speech"]
CHAT_ONLY: frozenset[Task] = frozenset({"chat"})
NOT_SERVED: dict[Task, str] = {  # the 400 for a task a model does not serve
    "chat": "Model {model!r} does not chat.",
    "embeddings": "Model {model!r} is not an embedding model.",
    "rerank": "Model {model!r} is not a reranker.",
    "transcription": "Model {model!r} is not a speech-to-text model.",
    "speech": "Model {model!r} is not a text-to-speech model.",
}


def not_served(model_id: str, task: Task) -> SluicegateError:
    return invalid(NOT_SERVED[task].format(model=model_id), param="model", code="model_not_supported")


@dataclass(slots=True)
class LoadConfig:
    """Settings a client asked one load of an instance for: LM Studio's load config, or the
    per-request `context_length` of the request that loads it just in time. None: the engine's
    own configured value."""

    context_length: int | None = None


class Discovery(ABC):
    """Models that a `[[models]]` table stands for but that are only known at runtime (e.g.
    an upstream's `/v1/models`). The registry asks at startup and every `interval` seconds;
    a failure is logged and retried, never fatal."""

    interval: float = 60.0

    @abstractmethod
    async def engines(self) -> list[Engine]:
        """One engine per model found now; raise when the source cannot be reached."""

    async def start(self) -> None:
        """Start background work the found engines share (e.g. health checks)."""
        return None

    async def aclose(self) -> None:
        return None


class Engine(ABC):
    """One model's generator. `kind` is the `engine = ...` name used in the config."""

    kind: ClassVar[str]
    # Engines with nothing to load (an upstream) say False and never emit load events.
    needs_load: ClassVar[bool] = False
    # Engines that load a model's weights into this process say True: one copy per process,
    # so a server with several worker processes cannot serve them (`sluicegate.app.serving`).
    holds_weights: ClassVar[bool] = False
    # Engines that reach a remote server say True: their stream then yields `Answered` once the
    # server accepted the request, or `Failed` if it refused before sending anything. Routes
    # wait for that (bounded) before sending their own status line, so a refusal is an HTTP
    # error in the client's dialect and the headers can name who serves the request.
    answers_first: ClassVar[bool] = False
    # Requests one instance runs at once unless the config says (`max_concurrency`; 0: no cap):
    # a llama.cpp context runs one sequence; an upstream that batches (vLLM, SGLang) is not
    # capped by default, so a gateway never holds requests in its queue while the upstream idles.
    default_max_concurrency: ClassVar[int] = 64
    # Engines that read an image's pixels themselves (llama.cpp with a projector) say True: the
    # turn runner then decodes every image part (`ContentPart.picture`) within the server's
    # limits before `check`; other engines get image parts as URLs, to pass on.
    reads_pixels: ClassVar[bool] = False
    # Engines whose `check` does heavy work (llama.cpp tokenizes a long prompt, preprocesses images
    # through its projector) say True: it then runs in a worker thread (`Model.admit_task`), never on
    # the event loop, so it must be safe to run beside the engine's own threads.
    heavy_checks: ClassVar[bool] = False
    # Instances built up front (an engine's `parallel = N` config key sets it).
    parallel: int = 1

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.created = int(time.time())  # stable for the listing's `created`

    def default_concurrency(self) -> int:
        """Requests this instance runs at once unless the config says (a batching llama.cpp
        context: its sequences)."""
        return self.default_max_concurrency

    @classmethod
    @abstractmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> Engine:
        """Build from a `[[models]]` table; relative paths resolve against `base_dir`."""

    @classmethod
    def discovery(cls, table: dict[str, Any], base_dir: Path) -> Discovery | None:
        """A `Discovery` when `table` asks for its models to be found at runtime, else None."""
        return None

    @abstractmethod
    def info(self) -> ModelInfo: ...

    def check(self, request: ChatRequest) -> None:
        """Raise `SluicegateError` (400) for anything in the request this engine cannot honour.

        Subclasses extend this and call it: the canonical stream carries one choice, so `n`
        above 1 is refused here for every engine rather than silently ignored.
        """
        # The messages first: `info()` builds a new ModelInfo, and most requests carry neither
        # images nor audio (one plain loop: a text message is one type test, no generator).
        images = audio = False
        for m in request.messages:
            if not isinstance(m.content, str):
                for p in m.content:
                    if p.type == "image":
                        images = True
                    elif p.type == "audio":
                        audio = True
        if images and not self.info().capabilities.vision:
            raise invalid(
                f"Model {self.model_id!r} does not accept image input.",
                param=None,
                code="image_input_unsupported",
            )
        if audio and not self.info().capabilities.audio:
            raise invalid(
                f"Model {self.model_id!r} does not accept audio input (a llama.cpp model takes it "
                "with a projector that has an audio encoder).",
                param=None,
                code="audio_input_unsupported",
            )
        if request.prompt is not None:
            self.check_completion(request)
        if request.sampling.logit_bias_text:  # an engine with a tokenizer resolved them before
            raise invalid(
                f"Invalid 'logit_bias': the {self.kind} engine of model {self.model_id!r} takes "
                "token ids only, not text.",
                param="logit_bias",
            )
        if request.sampling.n != 1:
            raise invalid(
                f"n={request.sampling.n} is not supported by the {self.kind} engine of "
                f"model {self.model_id!r}; it generates one choice per request",
                param="n",
                code="unsupported_parameter",
            )

    def tasks(self) -> frozenset[Task]:
        """What this engine serves; the routes ask this, never the engine's class. An engine
        that lists "embeddings" or "rerank" implements `embed` or `rerank`."""
        return CHAT_ONLY

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """One vector per input. Raise `SluicegateError` (400) for what this model cannot
        embed (too many tokens, `dimensions`); stop promptly when cancelled. The inputs passed
        `core.embeddings.check_inputs` already."""
        raise not_served(self.model_id, "embeddings")

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """One relevance score per document, in order; the rest as `embed`."""
        raise not_served(self.model_id, "rerank")

    async def relay(self, path: str, body: dict[str, Any]) -> Any:
        """A task this engine hands on to a server as the client sent it (an upstream's
        `/embeddings`, `/rerank`, relative to its base URL): the server's JSON answer, with
        this model's id, so fields Sluicegate does not model pass through. None (the default):
        the route calls the task's method (`embed`, `rerank`) instead."""
        return None

    def check_completion(self, request: ChatRequest) -> None:
        """Refuse a text completion this model cannot run (by its declared capabilities)."""
        capabilities = self.info().capabilities
        prompt = request.prompt
        assert prompt is not None
        if not capabilities.completion:
            raise invalid(
                f"Model {self.model_id!r} does not do text completion (a raw prompt); "
                "use a chat endpoint with messages.",
                param="model",
                code="model_not_supported",
            )
        if prompt.fill_in_middle and not capabilities.fill_in_middle:
            raise fim_unsupported(self.model_id)
        if prompt.media and not capabilities.vision:  # llama-server's words for it
            raise invalid(
                f"Multimodal data provided, but model {self.model_id!r} does not support multimodal requests.",
                param="prompt",
                code="image_input_unsupported",
            )
        if prompt.media and not self.reads_pixels:
            raise invalid(
                f"The {self.kind} engine of model {self.model_id!r} takes images in chat messages only, "
                "not with a raw prompt.",
                param="prompt",
                code="image_input_unsupported",
            )

    def count_tokens(self, request: ChatRequest) -> int | None:
        """The prompt's token count by this engine's own tokenizer, or None without one."""
        return None

    async def start(self) -> None:
        """Start background work (health checks, discovery) once the server runs."""
        return None

    def configure_load(self, config: LoadConfig) -> None:
        """Use `config` for the next `load()`; called before every load (an engine with nothing
        to configure ignores it). Values were checked against `info()` already."""
        return None

    async def load(self, on_progress: ProgressCallback) -> None:
        """Load weights (or whatever this engine needs), reporting progress 0..1."""
        return None

    async def unload(self) -> None:
        """Free what `load` took."""
        return None

    @abstractmethod
    def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        """Yield raw events for one request. Must stop at once when cancelled or closed."""

    async def aclose(self) -> None:
        """Release everything at server shutdown."""
        return None

    # Speech (issue 45): an engine that hears or speaks overrides these and says so in `tasks()`;
    # the routes run them on an admitted, loaded instance (`Model.admit_task`, `Instance.slot`).
    def transcribe(self, request: TranscriptionRequest) -> AsyncIterator[TranscriptEvent]:
        """Yield `Segment`s as they are recognised, then one `Transcribed`. Must stop at once
        when closed (the client left)."""
        raise invalid(f"Model {self.model_id!r} does not transcribe audio.", param="model")

    def check_transcription(self, words: bool) -> None:
        """Refuse (a 400) a transcription this model cannot give, before it is queued or loaded:
        `words`, word timestamps asked for. A model that transcribes gives them unless it says."""
        return None

    def synthesize(self, request: SpeechRequest) -> AsyncIterator[Voiced]:
        """Yield one `Voiced` per sentence as soon as it is synthesised. Must stop at once when
        closed."""
        raise invalid(f"Model {self.model_id!r} does not synthesise speech.", param="model")

    def voices(self) -> list[Voice]:
        """The voices a speech model has (the first is its default)."""
        return []

    def relay_audio(self, path: str, body: Upload | dict[str, Any]) -> AsyncIterator[bytes] | None:
        """An audio request this engine hands on to a server as the client sent it (`path`:
        `/audio/transcriptions`, `/audio/translations` with the form, `/audio/speech` with the
        JSON body): the answer's bytes as they arrive, raising a `SluicegateError` for a
        refusal before the first. None (the default): the engine does the work itself."""
        return None

    # --- Optional: the model's own tokenizer and chat template -------------------------------
    # For llama-server's `/tokenize`, `/detokenize`, `/apply-template` and `/props`. None (the
    # default) says the engine has none; the route then answers that the model cannot.

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int] | None:
        """`text`'s token ids (`add_special`: BOS and the like; `parse_special`: special tokens
        written in the text are read as such)."""
        return None

    def token_pieces(self, tokens: list[int]) -> list[bytes] | None:
        """Each token's bytes (special tokens as their text); a bad id is a 400."""
        return None

    def apply_template(self, request: ChatRequest, *, generation_prompt: bool = True) -> str | None:
        """The prompt the chat template renders for `request` (what generation would decode);
        without `generation_prompt`, the turns alone (llama-server's `add_generation_prompt: false`
        after a user turn)."""
        return None

    def chat_template(self) -> str | None:
        """The model's chat template source."""
        return None
