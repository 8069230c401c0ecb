"""The rerank wire format llama-server, Jina and Cohere share (`POST /v1/rerank`, `/rerank`).

`{"model", "query", "documents": [string | {"text"}], "top_n", "return_documents"}` →
`{"model", "object": "list", "results": [{"index", "relevance_score"[, "document"]}], "usage"}`,
the results best first and at most `top_n` of them. Text Embeddings Inference's shape, which
llama-server also answers: `"texts"` in place of `"documents"` (and `return_text`) →
`[{"index", "score"[, "text"]}]`, best first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluicegate.core.rerank import RerankRequest, RerankResult
from sluicegate.core.validation import Fields

MAX_DOCUMENTS = 1000  # Cohere's limit per request


@dataclass(frozen=True, slots=True)
class RerankBody:
    """A rerank request as the wire gives it: the task, and how to answer it."""

    model: str
    rerank: RerankRequest
    top_n: int | None
    return_documents: bool
    tei: bool = False  # TEI's request (`texts`): a bare array of `{"index", "score"}`


def _document(f: Fields, index: int, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])
    f.fail(
        "documents", f"Invalid '{f.where('documents')}[{index}]': expected a string or an object with 'text'."
    )


def parse_rerank_request(body: Any) -> RerankBody:
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    query = f.string("query", required=True)
    tei = "texts" in f.obj and "documents" not in f.obj
    documents = f.array("texts" if tei else "documents", required=True, non_empty=True)
    assert query is not None and documents is not None
    if len(documents) > MAX_DOCUMENTS:
        f.fail(
            "documents", f"Invalid 'documents': at most {MAX_DOCUMENTS} per request, got {len(documents)}."
        )
    texts = [_document(f, i, d) for i, d in enumerate(documents)]
    top_n = f.integer("top_n", low=1)
    return_documents = bool(f.boolean("return_text" if tei else "return_documents"))
    return RerankBody(model, RerankRequest(query, texts), top_n, return_documents, tei)


def rerank_body(request: RerankBody, ranked: RerankResult) -> dict[str, Any] | list[dict[str, Any]]:
    order = sorted(range(len(ranked.scores)), key=lambda i: -ranked.scores[i])
    if request.top_n is not None:
        order = order[: request.top_n]
    if request.tei:
        return [
            {
                "index": index,
                "score": ranked.scores[index],
                **({"text": request.rerank.documents[index]} if request.return_documents else {}),
            }
            for index in order
        ]
    results: list[dict[str, Any]] = []
    for index in order:
        result: dict[str, Any] = {"index": index, "relevance_score": ranked.scores[index]}
        if request.return_documents:
            result["document"] = {"text": request.rerank.documents[index]}
        results.append(result)
    return {
        "model": request.model,
        "object": "list",
        "results": results,
        "usage": {"prompt_tokens": ranked.prompt_tokens, "total_tokens": ranked.prompt_tokens},
    }
