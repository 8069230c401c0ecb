"""The leniency clients written for llama-server, LM Studio or Ollama-fronting proxies count on:
`[server] default_model` serves a request that names no model, `model: null` or an unknown one;
a model's `aliases` (globs included) name it; the OpenAI paths answer without `/v1`; `GET /models`
is JSON for a client and the page for a browser. Every dialect resolves the same way."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import DEFAULT_REPLY, Server, scripted

pytestmark = pytest.mark.e2e

KEY = "sk-lenient"
AUTH = {"Authorization": f"Bearer {KEY}"}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def lenient(start_server: StartServer) -> Server:
    return start_server(
        {"api_key": KEY, "default_model": "chat"},
        [
            {**scripted("chat", "chat.yaml"), "aliases": ["gpt-*"]},
            {**scripted("other", "echo.yaml"), "aliases": ["claude-*", "o3"]},
        ],
    )


@pytest.fixture(scope="module")
def strict(start_server: StartServer) -> Server:
    return start_server({}, [scripted("chat", "chat.yaml")])


def sdk(server: Server, base: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + base, api_key=KEY, max_retries=0, timeout=30.0)


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "nobody-has-this", "chat"])
def test_unknown_names_and_aliases_are_served(lenient: Server, model: str) -> None:
    with sdk(lenient) as client:
        completion = client.chat.completions.create(model=model, messages=HI)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.model == "chat"  # the model that served it


@pytest.mark.parametrize("body", [{}, {"model": None}, {"model": ""}])
def test_no_model_is_the_default(lenient: Server, body: dict[str, object]) -> None:
    for path, request in (
        ("/v1/chat/completions", {"messages": HI}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/responses", {"input": "hi"}),
        ("/v1/messages", {"max_tokens": 50, "messages": HI}),
    ):
        response = httpx.post(lenient.base_url + path, json=request | body, headers=AUTH, timeout=30.0)
        assert response.status_code == 200, (path, response.text)
        assert response.json()["model"] == "chat", path


def test_an_alias_glob_picks_its_model_in_every_dialect(lenient: Server) -> None:
    with anthropic.Anthropic(base_url=lenient.base_url, api_key=KEY, max_retries=0) as client:
        message = client.messages.create(model="claude-local-x", max_tokens=50, messages=HI)  # type: ignore[arg-type]
    assert message.model == "other"
    with sdk(lenient) as openai_client:
        response = openai_client.responses.create(model="o3", input="hi")
    assert response.model == "other"
    ollama = httpx.post(
        lenient.base_url + "/api/chat",
        json={"model": "claude-x", "messages": HI, "stream": False},
        headers=AUTH,
    )
    assert ollama.status_code == 200 and ollama.json()["model"] == "claude-x"  # Ollama echoes the name


def test_count_tokens_resolves_the_same_way(lenient: Server) -> None:
    with anthropic.Anthropic(base_url=lenient.base_url, api_key=KEY, max_retries=0) as client:
        counted = client.messages.count_tokens(model="claude-opus-4", messages=HI)  # type: ignore[arg-type]
    assert counted.input_tokens > 0


def test_without_a_default_nothing_changes(strict: Server) -> None:
    missing = httpx.post(strict.base_url + "/v1/chat/completions", json={"messages": HI})
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "Missing required parameter: 'model'."
    assert missing.json()["error"]["param"] == "model"
    unknown = httpx.post(strict.base_url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": HI})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_the_openai_paths_without_v1(lenient: Server) -> None:
    with sdk(lenient, base="") as client:
        completion = client.chat.completions.create(model="gpt-4o", messages=HI)
        assert completion.choices[0].message.content == DEFAULT_REPLY
        streamed = client.chat.completions.create(model="gpt-4o", messages=HI, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == DEFAULT_REPLY
        response = client.responses.create(model="gpt-4o", input="hi")
        assert response.output_text == DEFAULT_REPLY
        assert [m.id for m in client.models.list()] == ["chat", "other"]


def test_models_is_json_for_clients_and_the_page_for_browsers(lenient: Server) -> None:
    listing = httpx.get(lenient.base_url + "/models", headers=AUTH | {"Accept": "application/json"})
    assert listing.status_code == 200
    assert [m["id"] for m in listing.json()["data"]] == ["chat", "other"]
    assert httpx.get(lenient.base_url + "/models").status_code == 401  # the listing needs the key
    page = httpx.get(lenient.base_url + "/models", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


def test_a_default_that_is_not_served_stops_the_start(tmp_path: object) -> None:
    from sluicegate.app.factory import create_app
    from sluicegate.config import Settings
    from sluicegate.core.errors import ConfigError

    with pytest.raises(ConfigError, match="'missing'"):
        create_app(Settings(default_model="missing", data_dir=tmp_path))  # type: ignore[arg-type]
