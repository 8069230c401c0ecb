"""Embeddings relayed to an `openai` upstream: its answer is checked before it reaches a client.

An upstream's 200 is not trusted to be an embeddings list: JSON of another shape (`[1,2,3]`,
`null`, `{"error": …}`) is as much a failed upstream as text or a broken body, and gets the
same 502 (`UpstreamEngine.exchange` raises for the rest).
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError

Json = dict[str, Any]
EMBEDDINGS_PATH = "/embeddings"
MAX_UPSTREAM_BODY = 256 << 20  # an upstream's answer is read whole: bounded


def checked_embeddings(answer: Any, replica: str) -> Json:
    """`answer` when it is an embeddings list (`data`: objects, each with a vector of numbers
    or a base64 string), else the upstream's failure."""
    if isinstance(answer, dict) and isinstance(data := answer.get("data"), list) and all(map(_vector, data)):
        return answer
    error = answer.get("error") if isinstance(answer, dict) else None
    detail = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    raise SluicegateError(
        ErrorKind.UPSTREAM,
        f"The upstream {replica} failed: its answer is not an embeddings list"
        + (f" ({str(detail)[:500]})." if detail else "."),
        code="upstream_error",
    )


def _vector(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    vector = item.get("embedding")
    if isinstance(vector, str):
        return True
    return isinstance(vector, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    )
