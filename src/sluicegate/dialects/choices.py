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
from sluicegate.dialects.base import Encoder, EncoderContext

Json = dict[str, Any]


class ChoiceEncoder(Encoder, Protocol):
    def usage_chunk(self, usage: Usage) -> Frame: ...


class IndexedChoices:
    """`make(index, context)`: choice `index`'s encoder; `usage_body`: the dialect's usage."""

    def __init__(
        self,
        make: Callable[[int, EncoderContext], ChoiceEncoder],
        usage_body: Callable[[Usage], Json],
        *,
        include_usage: bool,
    ) -> None:
        self._make = make
        self._usage_body = usage_body
        self._include_usage = include_usage
        self._encoders: list[ChoiceEncoder] = []

    def encoder(self, index: int, context: EncoderContext) -> Encoder:
        encoder = self._make(index, context)
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
