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
from e2e_support import Server

pytestmark = pytest.mark.e2e

MODEL = "tiny"
PROMPT = "Tell me a story."
LOOP = "n we n we n we"  # the demo model's greedy text repeats this


def complete(server: Server, **fields: Any) -> str:
    body = {"prompt": PROMPT, "n_predict": 40, "temperature": 1.0, "seed": 5, **fields}
    response = httpx.post(server.base_url + "/completion", json=body, timeout=120)
    assert response.status_code == 200, response.text
    content: str = response.json()["content"]
    return content


def test_dry_stops_the_greedy_loop(tiny_server: Server) -> None:
    greedy = complete(tiny_server, temperature=0, n_predict=60)
    assert LOOP + " " + LOOP in greedy  # the loop DRY must break: the test can fail
    for dry in ({"dry_multiplier": 0.8}, {"dry_multiplier": 2.0, "dry_allowed_length": 1}):
        assert LOOP not in complete(tiny_server, temperature=0, n_predict=60, **dry)


def test_dry_with_its_own_sequence_breakers(tiny_server: Server) -> None:
    assert LOOP not in complete(
        tiny_server, temperature=0, n_predict=60, dry_multiplier=0.8, dry_sequence_breakers=["\n"]
    )
    bad = httpx.post(
        tiny_server.base_url + "/completion", json={"prompt": PROMPT, "dry_sequence_breakers": []}, timeout=60
    )
    assert bad.status_code == 400 and "dry_sequence_breakers" in bad.text


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_samples_other_text(tiny_server: Server, version: int) -> None:
    assert complete(tiny_server, mirostat=version) != complete(tiny_server)
    assert complete(tiny_server, mirostat=version) == complete(tiny_server, mirostat=version)  # seeded


def test_xtc_excludes_the_top_choices(tiny_server: Server) -> None:
    assert complete(tiny_server, xtc_probability=1.0, xtc_threshold=0.1) != complete(tiny_server)


def test_a_tiny_top_n_sigma_keeps_only_the_top_token(tiny_server: Server) -> None:
    greedy = complete(tiny_server, temperature=0)
    assert complete(tiny_server) != greedy  # sampling differs from greedy without it: the test can fail
    assert complete(tiny_server, top_n_sigma=0.001) == greedy


def test_chat_completions_take_them_through_the_sdk(tiny_server: Server) -> None:
    with openai.OpenAI(
        base_url=tiny_server.api_url, api_key="unused", max_retries=0, timeout=120.0
    ) as tiny_sdk:

        def chat(**extra: Any) -> str:
            completion = tiny_sdk.chat.completions.create(
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
