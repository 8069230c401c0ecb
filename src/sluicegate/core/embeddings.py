"""Embedding requests and results, between the embeddings dialect and the engines that embed.

An embedding request travels to its engine as a `ChatRequest` with no messages and this job in
`extra[EMBED]`, so it is admitted, queued, loaded just in time and counted like any request;
the engine puts its answer in `job.result` before its stream finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EMBED = "embed"  # the ChatRequest.extra key


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: list[list[float]]  # one per input, in order, L2-normalised
    prompt_tokens: int


@dataclass(slots=True)
class EmbeddingJob:
    inputs: list[str | list[int]]  # texts, or token ids as the client sent them
    dimensions: int | None = None  # truncate to this many and renormalise
    result: Embedded | None = field(default=None, compare=False)  # set by the engine
