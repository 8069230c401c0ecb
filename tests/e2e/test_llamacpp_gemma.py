"""A real model, served with nothing but its path: Gemma 3 270M (Q4_K_M) from PyPI.

Its GGUF has no chat template, so it is served with Gemma's turn format (the architecture's
fallback), and it must answer coherently and write valid JSON under `response_format`. The
GGUF is assembled once into the test cache (`gemma_model.py`).
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


def ask(sdk: openai.OpenAI, question: str, **extra: Any) -> str:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        seed=0,
        **extra,
    )
    return completion.choices[0].message.content or ""


def test_it_knows_the_capital_of_france(sdk: openai.OpenAI) -> None:
    answer = ask(sdk, "What is the capital of France?", max_tokens=48)
    assert "Paris" in answer, answer


def test_json_object(sdk: openai.OpenAI) -> None:
    answer = ask(
        sdk,
        "Give the capital of France as a JSON object with the key capital.",
        max_tokens=200,
        response_format={"type": "json_object"},
    )
    assert isinstance(json.loads(answer), dict), answer


def test_json_schema(sdk: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "country": {"type": "string", "maxLength": 20},
            "capital": {"type": "string", "maxLength": 20},
        },
        "required": ["country", "capital"],
        "additionalProperties": False,
    }
    answer = ask(
        sdk,
        "What is the capital of France? Answer in JSON.",
        max_tokens=200,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": schema, "strict": True},
        },
    )
    jsonschema.validate(json.loads(answer), schema)
