"""Text completions as `Dialect`s: OpenAI's `/v1/completions` and llama-server's `/infill`.

Both are stateless and take no server-side tools: a raw prompt has no chat template to
render tools into. The engine lays the prompt out (fill-in-the-middle included); these only
translate the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluicegate.dialects.base import Choices, Dialect, DialectSpec, EncoderContext, Turn
from sluicegate.dialects.choices import IndexedChoices
from sluicegate.dialects.completions.encoder import CompletionsEncoder, InfillEncoder, usage_body
from sluicegate.dialects.completions.request import (
    CompletionOptions,
    InfillOptions,
    parse_completion_request,
    parse_infill_request,
)
from sluicegate.dialects.fingerprint import SYSTEM_FINGERPRINT
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.openai_errors import openai_error

SPEC = DialectSpec("completions", ("/v1/completions",), openai_error)
# llama-server's shape carries the HTTP status in the body, a router's 405 included.
INFILL_SPEC = DialectSpec("infill", ("/infill",), llama_server_error, error_at=llama_server_error)


class CompletionsDialect(Dialect):
    spec = SPEC
    path = "/v1/completions"

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_completion_request(body)
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="cmpl-", id_length=32)

    def encoder(self, turn: Turn, context: EncoderContext) -> CompletionsEncoder:
        return self._encoder(turn, context)

    def choices(self, turn: Turn) -> Choices:
        options: CompletionOptions = turn.request
        return IndexedChoices(
            lambda index, context: self._encoder(turn, context, index),
            usage_body,
            include_usage=options.include_usage,
        )

    def _encoder(self, turn: Turn, context: EncoderContext, choice: int | None = None) -> CompletionsEncoder:
        """The response's encoder, or (`choice`) that of one of `n` > 1 choices: its index, no
        usage at its finish (the request's is summed once)."""
        options: CompletionOptions = turn.request
        return CompletionsEncoder(
            context.turn_id,
            context.created,
            turn.chat.model,
            include_usage=options.include_usage,
            logprobs=turn.chat.sampling.logprobs,
            system_fingerprint=SYSTEM_FINGERPRINT,
            index=choice or 0,
            usage_at_finish=choice is None,
        )


class InfillDialect(Dialect):
    """`default_model`: the model a request without `model` goes to (llama-server serves one)."""

    spec = INFILL_SPEC
    path = "/infill"

    def __init__(self, default_model: Callable[[], str | None] = lambda: None) -> None:
        self.default_model = default_model

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_infill_request(body, self.default_model())
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="")

    def encoder(self, turn: Turn, context: EncoderContext) -> InfillEncoder:
        options: InfillOptions = turn.request
        return InfillEncoder(
            turn.chat.model,
            context.accumulator,
            n_predict=options.n_predict,
            logprobs=turn.chat.sampling.logprobs,
        )
