"""llama-server's `POST /completion` as a `Dialect` (and `/completions`, which llama-server
answers in the same shape: its OpenAI completions are `/v1/completions`), and `POST /infill`,
which llama-server answers with the same objects and errors around a fill-in-the-middle prompt
(the engine lays it out with the model's FIM tokens). Stateless, no server-side tools: a raw
prompt has no chat template to render tools into."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluicegate.core.accumulate import ChatResult
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import Usage
from sluicegate.core.frames import Frame
from sluicegate.core.request import RawPrompt, SamplingParams
from sluicegate.dialects.base import Choices, Dialect, DialectSpec, Encoder, EncoderContext, Turn
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.encoder import CompletionEncoder
from sluicegate.dialects.llamaserver.request import CompletionOptions, parse_completion, parse_infill

# The shape carries the HTTP status in its body, a router's 405 included. `/completion` owns
# `/completions` too (the longest prefix wins; `/v1/completions` is OpenAI's).
PATHS = ("/completion", "/completions")
SPEC = DialectSpec(
    "llamaserver",
    ("/completion", "/tokenize", "/detokenize", "/apply-template", "/props", "/slots", "/lora-adapters"),
    llama_server_error,
    error_at=llama_server_error,
)
# `/infill` is labelled apart (metrics, logs): the same objects around a fill-in-the-middle prompt.
INFILL_SPEC = DialectSpec("infill", ("/infill",), llama_server_error, error_at=llama_server_error)


class LlamaServerDialect(Dialect):
    """`default_model`: the model a request without `model` goes to (llama-server serves one;
    its clients name none)."""

    spec = SPEC
    path = PATHS[0]
    also: tuple[str, ...] = PATHS[1:]

    def __init__(self, default_model: Callable[[], str | None] = lambda: None) -> None:
        self.default_model = default_model

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_completion(body, self.default_model())
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="")

    def encoder(self, turn: Turn, context: EncoderContext) -> CompletionEncoder:
        options: CompletionOptions = turn.request
        return CompletionEncoder(
            turn.chat.model, context.accumulator, options, _text(options, 0), sampling=turn.chat.sampling
        )

    def choices(self, turn: Turn) -> Choices | None:
        options: CompletionOptions = turn.request
        return (
            PromptChoices(turn.chat.model, options, turn.chat.sampling) if len(options.prompts) > 1 else None
        )


def _text(options: CompletionOptions, index: int) -> str:
    """The prompt as the final object repeats it: a text prompt's text."""
    prompt = options.prompts[index] if index < len(options.prompts) else ""
    return prompt if isinstance(prompt, str) else ""


class PromptChoices:
    """Several prompts in one request: a generation each, answered as llama-server does — an
    array of final objects in the prompts' order, or streamed objects that name their
    prompt's `index`."""

    def __init__(self, model: str, options: CompletionOptions, sampling: SamplingParams) -> None:
        self.model = model
        self.options = options
        self.sampling = sampling
        self._encoders: list[CompletionEncoder] = []

    def encoder(self, index: int, context: EncoderContext) -> Encoder:
        encoder = CompletionEncoder(
            self.model, context.accumulator, self.options, _text(self.options, index), index, self.sampling
        )
        self._encoders.append(encoder)
        return encoder

    def prompt(self, index: int) -> RawPrompt | None:
        return RawPrompt(self.options.prompts[index])

    def ending(self, usage: Usage) -> list[Frame]:
        return []

    def body(self, results: Sequence[ChatResult], usage: Usage) -> list[dict[str, Any]]:
        return [encoder.body(result) for encoder, result in zip(self._encoders, results, strict=True)]


class InfillDialect(LlamaServerDialect):
    """`/infill`: `/completion`'s options, objects and errors; `default_model` is the first
    model that can fill in the middle. A model without FIM tokens is refused as llama-server
    refuses it (501, before any generation)."""

    spec = INFILL_SPEC
    path, also = "/infill", ()

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_infill(body, self.default_model())
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="")

    def check(self, turn: Turn, info: Any) -> None:
        if not info.capabilities.fill_in_middle:
            raise SluicegateError(
                ErrorKind.NOT_IMPLEMENTED,
                f"Infill is not supported by this model: {turn.chat.model!r} has no fill-in-the-middle tokens.",
                param="model",
                code="fill_in_middle_unsupported",
            )
