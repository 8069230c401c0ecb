"""Rerank requests and results, between the rerank wire format and the engines that rank.

As an embedding job: a `ChatRequest` with no messages carries this job in `extra[RERANK]`, so
it is admitted, queued, loaded just in time and counted like any request; the engine puts one
score per document in `job.result` before its stream finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RERANK = "rerank"  # the ChatRequest.extra key


@dataclass(frozen=True, slots=True)
class Ranked:
    scores: list[float]  # one per document, in the request's order
    prompt_tokens: int


@dataclass(slots=True)
class RerankJob:
    query: str
    documents: list[str]
    result: Ranked | None = field(default=None, compare=False)  # set by the engine
