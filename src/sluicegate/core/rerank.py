"""Rerank requests and results: what the rerank route parses into and `Engine.rerank` answers.

A rerank is a task of its own, not a chat: the route runs it through the model's instances
(`Model.run`: admitted, queued, loaded just in time and counted like a chat) and the engine
returns one score per document.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RerankRequest:
    query: str
    documents: list[str]


@dataclass(frozen=True, slots=True)
class RerankResult:
    scores: list[float]  # one per document, in the request's order
    prompt_tokens: int
