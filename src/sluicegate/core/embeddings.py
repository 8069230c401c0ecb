"""Embedding requests and results: what every embeddings route parses into and
`Engine.embed` answers, with the one set of input limits every route applies.

An embedding is a task of its own, not a chat: the routes run it through the model's
instances (`Model.run`: admitted, queued, loaded just in time and counted like a chat) and
the engine returns its result; nothing travels in `ChatRequest.extra`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sluicegate.core.errors import invalid

MAX_INPUTS = 2048  # OpenAI's limit on the number of inputs in one request, for every route


EmbedInput = str | list[int] | list[int | str]


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    # Texts, or token ids as the client sent them (llama-server's: ids with texts among them,
    # each text tokenized where it stands).
    inputs: list[EmbedInput]
    dimensions: int | None = None  # truncate to this many and renormalise


@dataclass(frozen=True, slots=True)
class EmbedResult:
    vectors: list[list[float]]  # one per input, in order, L2-normalised
    prompt_tokens: int


def check_inputs(inputs: Sequence[EmbedInput]) -> None:
    """The limits every embeddings route applies before a model sees the inputs (the token
    length is the engine's, by its own tokenizer): a 400 in the route's dialect."""
    if not inputs:
        raise invalid("Invalid 'input': at least one input is needed.", param="input")
    if len(inputs) > MAX_INPUTS:
        raise invalid(
            f"Invalid 'input': at most {MAX_INPUTS} inputs per request, got {len(inputs)}.", param="input"
        )
    if any(not text for text in inputs):
        raise invalid("Invalid 'input': empty inputs cannot be embedded.", param="input")
