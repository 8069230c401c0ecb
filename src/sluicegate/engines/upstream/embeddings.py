"""Embeddings and reranks relayed to an `openai` upstream: its answer is checked before it
reaches a client.

An upstream's 200 is not trusted to be an embeddings list: JSON of another shape (`[1,2,3]`,
`null`, `{"error": …}`) is as much a failed upstream as text or a broken body, and gets the
same 502 (`UpstreamEngine.exchange` raises for the rest). `embed_result` and `rerank_result`
read an answer as `Engine.embed`'s and `Engine.rerank`'s results.
"""

from __future__ import annotations

import base64
from typing import Any

from sluicegate.core.embeddings import EmbedResult
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.rerank import RerankResult

Json = dict[str, Any]
EMBEDDINGS_PATH = "/embeddings"
RERANK_PATH = "/rerank"
MAX_UPSTREAM_BODY = 256 << 20  # an upstream's answer is read whole: bounded


def checked_embeddings(answer: Any, replica: str) -> Json:
    """`answer` when it is an embeddings list (`data`: objects, each with a vector of numbers
    or a base64 string), else the upstream's failure."""
    if isinstance(answer, dict) and isinstance(data := answer.get("data"), list) and all(map(_vector, data)):
        return answer
    raise _not_a(answer, "an embeddings list", replica)


def _not_a(answer: Any, what: str, replica: str) -> SluicegateError:
    error = answer.get("error") if isinstance(answer, dict) else None
    detail = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return SluicegateError(
        ErrorKind.UPSTREAM,
        f"The upstream {replica} failed: its answer is not {what}"
        + (f" ({str(detail)[:500]})." if detail else "."),
        code="upstream_error",
    )


def embed_result(answer: Json) -> EmbedResult:
    """A checked embeddings answer (`checked_embeddings`) as a result: base64 vectors decoded."""
    vectors: list[list[float]] = []
    for item in answer["data"]:
        vector = item["embedding"]
        if isinstance(vector, str):
            import numpy as np  # here: a server that proxies no embeddings never loads it

            vector = np.frombuffer(base64.b64decode(vector), dtype="<f4").tolist()
        vectors.append(vector)
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return EmbedResult(vectors, tokens if isinstance(tokens, int) else 0)


def rerank_result(answer: Any, documents: int, replica: str) -> RerankResult:
    """A rerank answer (`results`: `index` and `relevance_score` each) as one score per document
    (0.0 for a document the upstream left out, as with its own `top_n`)."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise _not_a(answer, "a rerank list", replica)
    scores = [0.0] * documents
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score") if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < documents or not isinstance(score, int | float):
            raise _not_a(answer, "a rerank list", replica)
        scores[index] = float(score)
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return RerankResult(scores, tokens if isinstance(tokens, int) else 0)


def _vector(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    vector = item.get("embedding")
    if isinstance(vector, str):
        return True
    return isinstance(vector, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    )
