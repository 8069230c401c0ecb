"""llama-server's `POST /completion` as a `Dialect` (and `/completions`, which llama-server
answers in the same shape: its OpenAI completions are `/v1/completions`). Stateless, no
server-side tools: a raw prompt has no chat template to render tools into."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluicegate.dialects.base import Dialect, DialectSpec, EncoderContext, Turn
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.encoder import CompletionEncoder
from sluicegate.dialects.llamaserver.request import CompletionOptions, parse_completion

# The shape carries the HTTP status in its body, a router's 405 included. `/completion` owns
# `/completions` too (the longest prefix wins; `/v1/completions` is OpenAI's).
PATHS = ("/completion", "/completions")
SPEC = DialectSpec(
    "llamaserver",
    ("/completion", "/tokenize", "/detokenize", "/apply-template", "/props", "/slots", "/lora-adapters"),
    llama_server_error,
    error_at=llama_server_error,
)


class LlamaServerDialect(Dialect):
    """`default_model`: the model a request without `model` goes to (llama-server serves one;
    its clients name none)."""

    spec = SPEC
    path, also = PATHS[0], PATHS[1:]

    def __init__(self, default_model: Callable[[], str | None] = lambda: None) -> None:
        self.default_model = default_model

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_completion(body, self.default_model())
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="")

    def encoder(self, turn: Turn, context: EncoderContext) -> CompletionEncoder:
        options: CompletionOptions = turn.request
        prompt = turn.chat.prompt
        text = prompt.text if prompt is not None and isinstance(prompt.text, str) else ""
        return CompletionEncoder(turn.chat.model, context.accumulator, options, text)
