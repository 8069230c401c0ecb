"""OpenAI's `n` > 1 choices, for the dialects that have it (Chat Completions, Completions).

Each choice has the dialect's own encoder, built with the choice's `index` and without the
usage on its finish; the request's usage is one chunk with no choices at the end of a stream
(when `stream_options.include_usage` asks), and one `usage` in the body, summed as OpenAI does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sluicegate.core.accumulate import ChatResult
from sluicegate.core.events import Usage
from sluicegate.core.frames import Frame
from sluicegate.core.request import RawPrompt
from sluicegate.dialects.base import Encoder, EncoderContext, Turn

Json = dict[str, Any]


class ChoiceEncoder(Encoder, Protocol):
    def usage_chunk(self, usage: Usage) -> Frame: ...


class IndexedChoices:
    """A dialect's `choices()` for `turn`: `make(turn, context, index)` is its encoder of choice
    `index`; `usage_body` its usage. The turn's options say whether a stream ends with the usage
    chunk (`include_usage`, as both dialects' options name it)."""

    def __init__(
        self,
        turn: Turn,
        make: Callable[[Turn, EncoderContext, int], ChoiceEncoder],
        usage_body: Callable[[Usage], Json],
    ) -> None:
        self._turn = turn
        self._make = make
        self._usage_body = usage_body
        self._include_usage: bool = turn.request.include_usage
        self._encoders: list[ChoiceEncoder] = []

    def encoder(self, index: int, context: EncoderContext) -> Encoder:
        encoder = self._make(self._turn, context, index)
        self._encoders.append(encoder)
        return encoder

    def ending(self, usage: Usage) -> list[Frame]:
        return [self._encoders[0].usage_chunk(usage)] if self._include_usage else []

    def prompt(self, index: int) -> RawPrompt | None:
        return None

    def body(self, results: Sequence[ChatResult], usage: Usage) -> Json:
        bodies = [encoder.body(result) for encoder, result in zip(self._encoders, results, strict=True)]
        merged = bodies[0]
        merged["choices"] = [choice for body in bodies for choice in body["choices"]]
        merged["usage"] = self._usage_body(usage)
        return merged
