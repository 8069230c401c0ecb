"""POST /v1/rerank with the demo reranker (a tiny random-weight Qwen3-reranker-shaped GGUF), and
passed through to an `openai` upstream."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server
from fake_upstream import FakeUpstream
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

RANKER = "ranker"
DOCUMENTS = [
    "The weather in Paris is sunny.",
    "Please read the file.",
    "The quick brown fox jumps over the lazy dog.",
    "The weather in Paris is sunny.",
]


@pytest.fixture(scope="session")
def rerank_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("rerank")
    ranker = make_demo_gguf(folder / "ranker.gguf", rerank=True)
    chat = make_demo_gguf(folder / "chat.gguf")
    return start_server(
        models=[
            {"id": RANKER, "engine": "llamacpp", "path": str(ranker)},  # rank pooling, from its GGUF
            {"id": "chatty", "engine": "llamacpp", "path": str(chat)},
        ]
    )


def post(server: Server, body: dict[str, Any], path: str = "/v1/rerank") -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=60)


def test_scores_from_the_demo_reranker(rerank_server: Server) -> None:
    response = post(rerank_server, {"model": RANKER, "query": "weather in Paris", "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == RANKER and body["usage"]["prompt_tokens"] > len(DOCUMENTS)
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s < 1.0 for s in scores)
    by_index = {r["index"]: r["relevance_score"] for r in results}
    assert by_index[0] == pytest.approx(by_index[3]) and by_index[0] != pytest.approx(by_index[1])
    listing = httpx.get(f"{rerank_server.base_url}/v1/models", timeout=30).json()["data"]
    assert {m["id"]: m["meta"]["type"] for m in listing} == {RANKER: "rerank", "chatty": "llm"}
    again = post(
        rerank_server, {"model": RANKER, "query": "weather in Paris", "documents": DOCUMENTS}, "/rerank"
    )
    assert again.json()["results"] == results  # the same scores, on the llama-server path too


def test_top_n_and_documents_as_objects(rerank_server: Server) -> None:
    everything = post(rerank_server, {"model": RANKER, "query": "a fox", "documents": DOCUMENTS}).json()
    top = post(
        rerank_server,
        {
            "model": RANKER,
            "query": "a fox",
            "documents": [{"text": d} for d in DOCUMENTS],
            "top_n": 2,
            "return_documents": True,
        },
    ).json()
    assert [r["index"] for r in top["results"]] == [r["index"] for r in everything["results"][:2]]
    assert top["results"][0]["document"]["text"] == DOCUMENTS[top["results"][0]["index"]]


def test_tei_format(rerank_server: Server) -> None:
    """Text Embeddings Inference's request (`texts`, `return_text`) gets its bare array of
    `{"index", "score"}`, best first, with the same scores."""
    everything = post(rerank_server, {"model": RANKER, "query": "a fox", "documents": DOCUMENTS}).json()
    tei = post(rerank_server, {"model": RANKER, "query": "a fox", "texts": DOCUMENTS}, "/rerank")
    assert tei.status_code == 200, tei.text
    expected = [{"index": r["index"], "score": r["relevance_score"]} for r in everything["results"]]
    assert tei.json() == expected
    top = post(
        rerank_server,
        {"model": RANKER, "query": "a fox", "texts": DOCUMENTS, "top_n": 2, "return_text": True},
    ).json()
    assert [r["index"] for r in top] == [r["index"] for r in expected[:2]]
    assert top[0]["text"] == DOCUMENTS[top[0]["index"]]


def test_refusals(rerank_server: Server) -> None:
    for body in (
        {"model": RANKER, "query": "q"},
        {"model": RANKER, "query": "q", "documents": []},
        {"model": RANKER, "query": "q", "documents": [3]},
        {"model": RANKER, "query": "q", "documents": ["d"], "top_n": 0},
    ):
        response = post(rerank_server, body)
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    response = post(rerank_server, {"model": "chatty", "query": "q", "documents": ["d"]})
    assert response.status_code == 400 and response.json()["error"]["code"] == "model_not_supported"
    chat = httpx.post(
        f"{rerank_server.base_url}/v1/chat/completions",
        json={"model": RANKER, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert chat.status_code == 400
    assert "rerank" in chat.json()["error"]["message"]


def test_openai_upstream_rerank_passes_through(start_server: StartServer) -> None:
    with FakeUpstream(name="rerank") as fake:
        server = start_server(models=[upstream_model("up-rank", fake, scenario="reranker-fake")])
        response = post(
            server, {"model": "up-rank", "query": "paris weather", "documents": DOCUMENTS, "top_n": 1}
        )
        seen = [r.body for r in fake.requests if r.path.endswith("/rerank")]
    assert response.status_code == 200, response.text
    assert seen[0]["model"] == "reranker-fake" and seen[0]["top_n"] == 1
    body = response.json()
    assert body["model"] == "up-rank" and body["results"] == [{"index": 0, "relevance_score": 1.0}]
