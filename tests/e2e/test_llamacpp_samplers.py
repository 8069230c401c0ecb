"""llama.cpp's further samplers on the demo GGUF, as llama-server takes them: each changes what
is sampled. DRY stops the demo model's greedy loop; mirostat (1 and 2) and XTC sample other
text than the default chain at the same seed; a tiny `top_n_sigma` keeps only the top token,
so sampling at temperature 1 gives the greedy text. Through `/completion` and through Chat
Completions with the official `openai` SDK (`extra_body`)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server

pytestmark = pytest.mark.e2e

MODEL = "tiny"
PROMPT = "Tell me a story."
LOOP = "n we n we n we"  # the demo model's greedy text repeats this


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    return start_server(
        models=[{"id": MODEL, "engine": "llamacpp", "path": gguf, "batch_size": 16, "context_length": 1024}]
    )


def complete(server: Server, **fields: Any) -> str:
    body = {"prompt": PROMPT, "n_predict": 40, "temperature": 1.0, "seed": 5, **fields}
    response = httpx.post(server.base_url + "/completion", json=body, timeout=120)
    assert response.status_code == 200, response.text
    content: str = response.json()["content"]
    return content


def test_dry_stops_the_greedy_loop(server: Server) -> None:
    greedy = complete(server, temperature=0, n_predict=60)
    assert LOOP + " " + LOOP in greedy  # the loop DRY must break: the test can fail
    for dry in ({"dry_multiplier": 0.8}, {"dry_multiplier": 2.0, "dry_allowed_length": 1}):
        assert LOOP not in complete(server, temperature=0, n_predict=60, **dry)


def test_dry_with_its_own_sequence_breakers(server: Server) -> None:
    assert LOOP not in complete(
        server, temperature=0, n_predict=60, dry_multiplier=0.8, dry_sequence_breakers=["\n"]
    )
    bad = httpx.post(
        server.base_url + "/completion", json={"prompt": PROMPT, "dry_sequence_breakers": []}, timeout=60
    )
    assert bad.status_code == 400 and "dry_sequence_breakers" in bad.text


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_samples_other_text(server: Server, version: int) -> None:
    assert complete(server, mirostat=version) != complete(server)
    assert complete(server, mirostat=version) == complete(server, mirostat=version)  # seeded


def test_xtc_excludes_the_top_choices(server: Server) -> None:
    assert complete(server, xtc_probability=1.0, xtc_threshold=0.1) != complete(server)


def test_a_tiny_top_n_sigma_keeps_only_the_top_token(server: Server) -> None:
    greedy = complete(server, temperature=0)
    assert complete(server) != greedy  # sampling differs from greedy without it: the test can fail
    assert complete(server, top_n_sigma=0.001) == greedy


def test_chat_completions_take_them_through_the_sdk(server: Server) -> None:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:

        def chat(**extra: Any) -> str:
            completion = sdk.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=60,
                temperature=0,
                extra_body=extra,
            )
            return completion.choices[0].message.content or ""

        assert LOOP in chat()
        assert LOOP not in chat(dry_multiplier=0.8)
        with pytest.raises(openai.BadRequestError, match="mirostat"):
            chat(mirostat=3)
