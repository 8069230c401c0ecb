"""llama-server's `--context-shift` as Sluicegate's `context_shift = true`, on a real llama.cpp
model (the tiny demo GGUF, which never ends a reply): a `/completion` that asks for more tokens
than its context holds gets them all, `truncated`; without the switch the context ends it. And
`stop_type: "word"` with the stop string that ended the output, as llama-server's README has it.
The official `openai` SDK reads the shifted completion through `/v1/completions`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, parse_sse

pytestmark = pytest.mark.e2e

PROMPT = "Once upon a time, in a land far away,"
CONTEXT = 256  # per sequence (llama.cpp's least: a stream is rounded up to 256 cells)


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    table = {"engine": "llamacpp", "path": gguf, "batch_size": 32, "context_length": CONTEXT, "parallel": 2}
    return start_server(models=[{"id": "shift", **table, "context_shift": True}, {"id": "plain", **table}])


def post(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(server.base_url + "/completion", json=body, timeout=120.0)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_shifted_context_writes_every_token_asked_for(server: Server) -> None:
    body = post(server, {"model": "shift", "prompt": PROMPT, "n_predict": 400, "temperature": 0})
    assert body["tokens_predicted"] == 400 and body["timings"]["predicted_n"] == 400
    assert body["truncated"] is True and body["stop_type"] == "limit"
    plain = post(server, {"model": "plain", "prompt": PROMPT, "n_predict": 400, "temperature": 0})
    assert plain["tokens_evaluated"] + plain["tokens_predicted"] == CONTEXT
    assert plain["truncated"] is True and plain["stop_type"] == "limit"
    assert body["content"].startswith(plain["content"][:200])  # the same text until the context filled


def test_a_shifted_context_streamed_and_through_the_openai_sdk(server: Server) -> None:
    request = {"model": "shift", "prompt": PROMPT, "n_predict": 300, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.base_url + "/completion", json=request, timeout=120.0) as response:
        assert response.status_code == 200
        objects = [json.loads(f.data or "") for f in parse_sse(response.read().decode()) if f.data]
    final = objects[-1]
    assert final["stop"] is True and final["truncated"] is True and final["tokens_predicted"] == 300
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none")
    completion = client.completions.create(model="shift", prompt=PROMPT, max_tokens=300, temperature=0)
    assert completion.usage is not None and completion.usage.completion_tokens == 300
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].text == "".join(o["content"] for o in objects[:-1])


def test_stop_type_word_names_the_stop_string(server: Server) -> None:
    whole = post(server, {"model": "plain", "prompt": PROMPT, "n_predict": 40, "temperature": 0})
    word = whole["content"][20:24]
    body = post(
        server,
        {"model": "plain", "prompt": PROMPT, "n_predict": 40, "temperature": 0, "stop": ["QQQQ", word]},
    )
    assert body["stop_type"] == "word" and body["stopping_word"] == word
    assert whole["content"].startswith(body["content"]) and whole["stop_type"] == "limit"
