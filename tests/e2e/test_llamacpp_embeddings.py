"""POST /v1/embeddings with a real (tiny, random-weight) GGUF embedding model and the openai SDK."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from fake_upstream import FakeUpstream
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

EMBED = "tiny-embed"
DIMS = 256  # the demo's n_embd


@pytest.fixture
def sdk(llama_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llama_server.api_url, api_key="unused", max_retries=0, timeout=60.0
    ) as client:
        yield client


def test_strings_give_stable_normalised_vectors(sdk: openai.OpenAI) -> None:
    texts = ["The weather in Paris is sunny.", "Please read the file.", "The weather in Paris is sunny."]
    result = sdk.embeddings.create(model=EMBED, input=texts, encoding_format="float")
    assert [d.index for d in result.data] == [0, 1, 2] and result.model == EMBED
    vectors = np.array([d.embedding for d in result.data])
    assert vectors.shape == (3, DIMS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2], atol=1e-6) and not np.allclose(vectors[0], vectors[1])
    assert result.usage.prompt_tokens == result.usage.total_tokens > 6
    single = sdk.embeddings.create(model=EMBED, input=texts[1], encoding_format="float")
    assert np.allclose(single.data[0].embedding, vectors[1], atol=1e-5)  # batch or not, same vector


def test_base64_and_token_input_and_dimensions(sdk: openai.OpenAI, llama_server: Server) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    floats = sdk.embeddings.create(model=EMBED, input=text, encoding_format="float").data[0].embedding
    # The SDK asks for base64 by default and decodes it itself; decode by hand as well.
    decoded = sdk.embeddings.create(model=EMBED, input=text).data[0].embedding
    assert np.allclose(decoded, floats, atol=1e-6)
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        raw = client.post(
            "/v1/embeddings", json={"model": EMBED, "input": text, "encoding_format": "base64"}
        ).json()
        tokens = client.post(
            "/v1/embeddings", json={"model": EMBED, "input": [1, 2, 3, 4, 5], "encoding_format": "float"}
        ).json()
        v0 = client.post("/api/v0/embeddings", json={"model": EMBED, "input": text}).json()
    by_hand = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(by_hand, floats, atol=1e-6)
    assert len(tokens["data"][0]["embedding"]) == DIMS and tokens["usage"]["prompt_tokens"] == 5
    assert np.allclose(v0["data"][0]["embedding"], floats, atol=1e-6)  # LM Studio's v0 path
    short = (
        sdk.embeddings.create(model=EMBED, input=text, dimensions=64, encoding_format="float")
        .data[0]
        .embedding
    )
    assert len(short) == 64 and abs(float(np.linalg.norm(short)) - 1.0) < 1e-5
    expected = np.array(floats[:64]) / np.linalg.norm(floats[:64])  # truncated, then renormalised
    assert np.allclose(short, expected, atol=1e-5)


def test_refusals(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model=EMBED, input="x", dimensions=DIMS + 1)
    assert caught.value.param == "dimensions"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model="tiny", input="x")  # a chat model
    assert caught.value.code == "model_not_supported"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=EMBED, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "model_not_supported" and "/v1/embeddings" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model=EMBED, input=[])
    assert caught.value.param == "input"


def test_listed_as_embedding_models(sdk: openai.OpenAI, llama_server: Server) -> None:
    meta = {m.id: (m.model_extra or {}).get("meta") for m in sdk.models.list()}
    assert meta[EMBED]["type"] == "embeddings" and meta["tiny"]["type"] == "llm"
    with httpx.Client(base_url=llama_server.base_url, timeout=30.0) as client:
        models = {m["key"]: m for m in client.get("/api/v1/models").json()["models"]}
    assert models[EMBED]["type"] == "embedding" and models["tiny"]["type"] == "llm"
    # No context_length in its config: the trained 4096 (its KV cache, 4 KiB a token, fits the
    # default budget); the chat model's comes from its config. Both listings say so.
    context = {"loaded": 4096, "source": "trained", "trained": 4096, "kv_cache_bytes_per_token": 4096}
    assert (
        context.items() <= meta[EMBED]["context"].items()
        and context.items() <= models[EMBED]["context"].items()
    )
    assert (
        models[EMBED]["max_context_length"] == 4096
        and meta[EMBED]["context"]["kv_cache_bytes"] == 4096 * 4096
    )
    assert meta["tiny"]["context"]["source"] == "config" and meta["tiny"]["context"]["loaded"] == 2048


def test_openai_upstream_models_pass_through(start_server: StartServer) -> None:
    with FakeUpstream(name="embed") as fake:
        server = start_server(models=[upstream_model("up-embed", fake, scenario="text-embedding-fake")])
        with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
            result = sdk.embeddings.create(model="up-embed", input=["odd", "even"])  # the SDK asks base64
            floats = sdk.embeddings.create(model="up-embed", input="odd", encoding_format="float")
        # Ollama's route asks the engine (`Engine.embed`), which relays an OpenAI body.
        ollama = httpx.post(
            server.base_url + "/api/embed", json={"model": "up-embed", "input": ["odd", "even"]}
        )
        seen = [r.body for r in fake.requests if r.path.endswith("/embeddings")]
    assert [seen[0]["model"], seen[0]["input"]] == ["text-embedding-fake", ["odd", "even"]]
    assert result.model == "up-embed" and result.usage.prompt_tokens == 7
    assert np.allclose(result.data[0].embedding, [0.6, 0.8, 0.0]) and np.allclose(
        result.data[1].embedding, [0.0, 0.6, 0.8]
    )
    assert floats.data[0].embedding == pytest.approx([0.6, 0.8, 0.0])
    assert ollama.status_code == 200 and ollama.json()["prompt_eval_count"] == 7
    assert np.allclose(ollama.json()["embeddings"], [[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]])


@pytest.mark.parametrize(
    ("inputs", "says"),
    [("", "empty"), ([""], "empty"), (["a", ""], "empty"), (["a"] * 2049, "at most 2048")],
    ids=["empty-string", "empty-in-list", "one-empty", "too-many"],
)
def test_every_route_has_the_same_embedding_limits(
    llama_server: Server, sdk: openai.OpenAI, inputs: str | list[str], says: str
) -> None:
    """An empty input was a 500 (`llama_decode failed`) on Ollama's /api/embed and any number of
    inputs went through there; each route answers the same 400, in its own dialect's shape."""
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model=EMBED, input=inputs)
    assert caught.value.param == "input" and says in caught.value.message
    import ollama

    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=llama_server.base_url, timeout=60).embed(model=EMBED, input=inputs)
    assert refused.value.status_code == 400 and says in refused.value.error
    raw = httpx.post(f"{llama_server.base_url}/api/embed", json={"model": EMBED, "input": inputs}, timeout=60)
    assert raw.status_code == 400 and set(raw.json()) == {"error"}  # Ollama's shape


def test_llama_servers_input_shapes(llama_server: Server) -> None:
    """llama-server's `input`: ids with texts among them (one input), `{"prompt_string"}` and
    `{"content": [text parts]}` objects, and arrays mixing them; each text part joined is the
    same input as the plain string. Other objects are a 400 naming `input`."""

    def embed(value: object) -> httpx.Response:
        with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
            body = {"model": EMBED, "input": value, "encoding_format": "float"}
            return client.post("/v1/embeddings", json=body)

    def vectors(value: object) -> list[list[float]]:
        response = embed(value)
        assert response.status_code == 200, response.text
        return [d["embedding"] for d in response.json()["data"]]

    assert len(vectors([12, 34, "string", 56, 78])) == 1  # one input
    assert len(vectors(["string1", [12, 34, 56]])) == 2
    assert len(vectors([[12, 34, 56], [12, "string", 34, 56]])) == 2
    both = vectors(
        ["hello world", {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}]
    )
    assert np.allclose(both[0], both[1], atol=1e-6)
    assert np.allclose(vectors({"prompt_string": "hello world"})[0], both[0], atol=1e-6)
    for bad in ({"content": "string"}, {"content": [{"type": "unknown"}]}, [{"text": "x"}]):
        response = embed(bad)
        assert response.status_code == 400 and response.json()["error"]["param"] == "input", bad
    too_long = embed("This is a test " * 2000)
    assert too_long.status_code == 400 and "too large" in too_long.json()["error"]["message"]
