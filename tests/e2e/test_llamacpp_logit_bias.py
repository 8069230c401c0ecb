"""`logit_bias` through llama.cpp's own sampler on the demo GGUF: the official `openai` SDK bans
a token (-100) and it never comes out over 200 sampled tokens, while the same seed without the
bias samples it; llama-server's `[[id, false]]` bans it the same way; a bias raises a token."""

from __future__ import annotations

from collections import Counter

import httpx
import openai
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "Tell me a long story about the sea."}]
TOKENS = 200


def sampled(sdk: openai.OpenAI, **extra: object) -> list[str]:
    """The pieces of 200 tokens sampled at temperature 1 with a fixed seed."""
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=TOKENS,
        temperature=1.0,
        seed=11,
        logprobs=True,
        **extra,  # type: ignore[arg-type]
    )
    content = completion.choices[0].logprobs and completion.choices[0].logprobs.content
    assert content is not None and len(content) == TOKENS
    return [lp.token for lp in content]


def token_id(server: Server, piece: str) -> int:
    tokens = httpx.post(server.base_url + "/tokenize", json={"content": piece, "with_pieces": True}).json()
    [token] = tokens["tokens"]
    assert token["piece"] == piece
    return int(token["id"])


def test_a_banned_token_never_comes_out(tiny_server: Server, tiny_sdk: openai.OpenAI) -> None:
    free = sampled(tiny_sdk)
    piece, count = Counter(p for p in free if p.strip()).most_common(1)[0]
    assert count >= 3  # sampled often without the bias: the test can fail
    banned = sampled(tiny_sdk, logit_bias={str(token_id(tiny_server, piece)): -100})
    assert piece not in banned


def test_a_bias_keyed_by_text_bans_the_texts_token(tiny_sdk: openai.OpenAI) -> None:
    """llama-server's text keys, read in Chat Completions too: the text's tokens get the bias."""
    free = sampled(tiny_sdk)
    piece, count = Counter(p for p in free if p.strip()).most_common(1)[0]
    assert count >= 3
    assert piece not in sampled(tiny_sdk, logit_bias={piece: -100})


def test_llama_servers_false_bans_it_and_a_bias_raises_one(
    tiny_server: Server, tiny_sdk: openai.OpenAI
) -> None:
    free = sampled(tiny_sdk)
    piece = Counter(p for p in free if p.strip()).most_common(1)[0][0]
    body = {
        "prompt": "Tell me a long story about the sea.",
        "n_predict": TOKENS,
        "seed": 11,
        "temperature": 1.0,
        "n_probs": 1,
        "logit_bias": [[token_id(tiny_server, piece), False]],
    }
    answer = httpx.post(tiny_server.base_url + "/completion", json=body, timeout=120.0).json()
    pieces = [p["token"] for p in answer["completion_probabilities"]]
    assert len(pieces) == TOKENS and piece not in pieces
    # A rare piece, pushed up by +10, becomes common.
    rare = min(Counter(p for p in free if p.strip()).items(), key=lambda kv: kv[1])[0]
    raised = sampled(tiny_sdk, logit_bias={str(token_id(tiny_server, rare)): 10})
    assert raised.count(rare) > free.count(rare) + 20


@pytest.mark.parametrize("bias", [{"5": 101}, {"99999999": -100}, [[1, "a"]]], ids=["range", "id", "shape"])
def test_bad_biases_are_400s(tiny_sdk: openai.OpenAI, bias: object) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiny_sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, logit_bias=bias)  # type: ignore[arg-type]
    assert "logit_bias" in str(caught.value)
