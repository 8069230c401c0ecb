"""Hostile bodies on the routes that run a GGUF (issue 47): Ollama's chat, generate and embed,
completions, infill and rerank, against llama.cpp demo models that do the work (a chat model
with fill-in-the-middle tokens, a reranker, an embedder), not only the scripted and upstream models of
`test_hostile_input.py`, whose bodies mostly end at a 400 before any engine runs.

Invariants as there: no 5xx; every error in the error shape of the path's API; no traceback in
the server's log; healthy afterwards with nothing in flight. Derandomized and bounded (a third
of `FUZZ_EXAMPLES` per route; `max_tokens`-like fields are drawn small and the context is short,
so a hostile one cannot run long).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fuzz_support import (
    CONTENT_TYPES,
    Server,
    check_answer,
    completions_bodies,
    dumps,
    infill_bodies,
    metric_totals,
    mutated,
    ollama_bodies,
    rerank_bodies,
    run_server,
    scripted,
    write_config,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluicegate.core.embeddings import MAX_INPUTS

pytestmark = pytest.mark.e2e

FUZZ = settings(
    max_examples=max(10, int(os.environ.get("FUZZ_EXAMPLES", "120")) // 3),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# The GGUF named most often (a name that is no model is a quick 404, already well covered).
OLLAMA_NAMES = st.sampled_from(["tiny", "tiny:latest", "Tiny", "tiny", "chat", "nope:7b"])
NAMES = st.sampled_from(["tiny", "tiny", "tiny", "chat", "rerank", "nope"])
RERANKERS = st.sampled_from(["rerank", "rerank", "rerank", "tiny", "nope"])
EMBEDDERS = st.sampled_from(["embed", "embed", "embed:latest", "tiny", "nope"])
EMBED_TEXT = st.one_of(st.text(max_size=30), st.just(""), st.just("x" * 3000))  # empty, over the context


def embed_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Ollama's `/api/embed`, as the `ollama` client libraries send it."""
    inputs = st.one_of(
        EMBED_TEXT,
        st.lists(EMBED_TEXT, max_size=4),
        st.just(["a"] * (MAX_INPUTS + 1)),  # one over the limit every embeddings route shares
    )
    required = st.fixed_dictionaries({"model": EMBEDDERS, "input": inputs})
    optional = st.fixed_dictionaries(
        {},
        optional={
            "truncate": st.booleans(),
            "dimensions": st.integers(-1, 128),
            "keep_alive": st.sampled_from([0, "5m", -1]),
            "options": st.fixed_dictionaries({}, optional={"num_ctx": st.integers(1, 4096)}),
        },
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


# One body each route answers 200, tried first: the fuzz's own draws may all be refused (the
# assertion below checks that bodies reach the model, which these make sure of).
VALID: dict[str, dict[str, Any]] = {
    "/api/chat": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": False},
    "/api/generate": {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 3}},
    "/v1/completions": {"model": "tiny", "prompt": "hi", "max_tokens": 3},
    "/infill": {"model": "tiny", "input_prefix": "def f(", "input_suffix": ")", "n_predict": 3},
    "/v1/rerank": {"model": "rerank", "query": "q", "documents": ["a", "b"]},
    "/rerank": {"model": "rerank", "query": "q", "documents": ["a", "b"]},
    "/api/embed": {"model": "embed", "input": "hello"},
}

ROUTES = [
    ("/api/chat", ollama_bodies(OLLAMA_NAMES)),
    ("/api/generate", ollama_bodies(OLLAMA_NAMES)),
    ("/v1/completions", completions_bodies(NAMES)),
    ("/infill", infill_bodies(NAMES)),
    ("/v1/rerank", rerank_bodies(RERANKERS)),
    ("/rerank", rerank_bodies(RERANKERS)),
    ("/api/embed", embed_bodies()),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("fuzz-models")
    tiny = make_demo_gguf(folder / "tiny.gguf", fim=True)
    reranker = make_demo_gguf(folder / "rerank.gguf", rerank=True)
    embedder = make_demo_gguf(folder / "embed.gguf", embedding=True)
    models = [
        {"id": "tiny", "engine": "llamacpp", "path": str(tiny), "context_length": 512},
        {"id": "rerank", "engine": "llamacpp", "path": str(reranker), "context_length": 512},
        {"id": "embed", "engine": "llamacpp", "path": str(embedder), "context_length": 512},
        scripted("chat", "chat.yaml"),
    ]
    config = write_config(folder, {"max_json_depth": 64}, models)
    with run_server(folder, config) as running:
        yield running


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.mark.parametrize(("path", "bodies"), ROUTES, ids=[p for p, _ in ROUTES])
def test_mutated_bodies_on_gguf_models(
    http: httpx.Client, path: str, bodies: st.SearchStrategy[dict[str, Any]]
) -> None:
    @FUZZ
    @given(
        data=st.one_of(bodies.map(dumps), mutated(bodies)),  # valid ones too: they reach the model
        content_type=st.sampled_from(CONTENT_TYPES),
    )
    @example(data=dumps(VALID[path]), content_type="application/json")
    def attack(data: bytes, content_type: str | None) -> None:
        headers = {"content-type": content_type} if content_type is not None else {}
        response = http.post(path, content=data, headers=headers)
        check_answer("POST", path, response)
        statuses.append(response.status_code)

    statuses: list[int] = []
    attack()
    assert 200 in statuses, statuses  # some bodies did reach the model


def test_zz_healthy_afterwards(server: Server, http: httpx.Client) -> None:
    assert http.get("/health").status_code == 200
    answered = http.post("/v1/completions", json={"model": "tiny", "prompt": "Once", "max_tokens": 3})
    assert answered.status_code == 200, answered.text
    ranked = http.post("/v1/rerank", json={"model": "rerank", "query": "q", "documents": ["a", "b"]})
    assert ranked.status_code == 200 and len(ranked.json()["results"]) == 2, ranked.text
    embedded = http.post("/api/embed", json={"model": "embed", "input": ["a", "b"]})
    assert embedded.status_code == 200 and len(embedded.json()["embeddings"]) == 2, embedded.text
    totals = metric_totals(http.get("/metrics").text)
    assert totals["sluicegate_requests_in_flight"] == 0, totals  # this request's own is not counted
    assert totals["sluicegate_generations_active"] == 0, totals
    assert totals["sluicegate_requests_total"] > len(ROUTES) * 10, totals  # the attack did happen
    output = server.output()
    assert "Traceback" not in output, output[-5000:]
    assert "Exception in ASGI application" not in output
