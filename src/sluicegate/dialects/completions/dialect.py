"""OpenAI's legacy text completions (`/v1/completions`) as a `Dialect`.

Stateless, no server-side tools: a raw prompt has no chat template to render tools into. The
engine lays the prompt out (fill-in-the-middle with a `suffix` included); this only translates
the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.dialects.base import Choices, Dialect, DialectSpec, EncoderContext, Turn
from sluicegate.dialects.choices import IndexedChoices
from sluicegate.dialects.completions.encoder import CompletionsEncoder, encoder_for, usage_body
from sluicegate.dialects.completions.request import parse_completion_request
from sluicegate.dialects.openai_errors import openai_error

SPEC = DialectSpec("completions", ("/v1/completions",), openai_error)


class CompletionsDialect(Dialect):
    spec = SPEC
    path = "/v1/completions"

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_completion_request(body)
        return Turn(request=options, chat=chat, stream=options.stream, id_prefix="cmpl-", id_length=32)

    def encoder(self, turn: Turn, context: EncoderContext) -> CompletionsEncoder:
        return self._encoder(turn, context)

    def choices(self, turn: Turn) -> Choices:
        return IndexedChoices(turn, self._encoder, usage_body)

    def _encoder(self, turn: Turn, context: EncoderContext, choice: int | None = None) -> CompletionsEncoder:
        """The response's encoder, or (`choice`) that of one of `n` > 1 choices (`encoder_for`)."""
        return encoder_for(turn, context, choice)
