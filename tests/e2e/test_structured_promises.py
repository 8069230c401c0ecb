"""Structured output keeps every promise its schema makes, on real llama.cpp.

The tiny model has random weights and never ends a reply by itself: it wanders through whatever
the grammar allows, so each constraint is exercised, and every completed answer must validate
against its schema with `jsonschema` (format checking on), streaming and not. Schemas that once
crashed the server or gave a 500 are answered (valid output or a 400), and the server keeps
serving afterwards. A server of its own: a crash here must not take the shared one down.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from pydantic import BaseModel, Field

pytestmark = pytest.mark.e2e

BUDGET = 300
MODELS = ("tiny", "tiny-batched")


@pytest.fixture(scope="module")
def structured_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(Path(tmp_path_factory.mktemp("gguf")) / "tiny.gguf", ends_replies=False))
    common = {"engine": "llamacpp", "path": gguf, "batch_size": 16, "context_length": 2048}
    return start_server(
        models=[
            {"id": "tiny", **common, "batching": False},
            {"id": "tiny-batched", **common, "parallel": 2, "batching": True},
        ]
    )


@pytest.fixture
def sdk(structured_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=structured_server.api_url, api_key="unused", max_retries=0, timeout=120.0
    ) as client:
        yield client


def _fmt(schema: dict[str, Any], strict: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "answer", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def _ask(sdk: openai.OpenAI, model: str, schema: dict[str, Any], seed: int, stream: bool) -> tuple[str, str]:
    """The answer's text and finish reason."""
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Answer."}],
        "response_format": _fmt(schema),
        "max_tokens": BUDGET,
        "seed": seed,
        "temperature": 1.0,
    }
    if not stream:
        choice = sdk.chat.completions.create(**kwargs).choices[0]
        return choice.message.content or "", str(choice.finish_reason)
    text, finish = "", ""
    for chunk in sdk.chat.completions.create(**kwargs, stream=True):
        for delta in chunk.choices:
            text += delta.delta.content or ""
            finish = delta.finish_reason or finish
    return text, finish


def _validate(schema: dict[str, Any], text: str) -> None:
    value = json.loads(text)
    jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _still_serving(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, seed=0
    )
    assert reply.choices[0].finish_reason == "length"


# Each of these gave a 500 or ended the server process (U+0000) with the converter before.
ONCE_FATAL = {
    "nul in enum": {"enum": ["a\u0000b", "c"]},
    "nul in const": {"const": "\u0000"},
    "newline in enum": {"enum": ["foo\nbar"]},
    "quote in a property name": {
        "type": "object",
        "properties": {'say "hi"': {"type": "integer"}, "back\\slash": {"type": "boolean"}},
        "required": ['say "hi"', "back\\slash"],
        "additionalProperties": False,
    },
    "\\w in a character class": {"type": "string", "pattern": "^[\\w.-]+$", "maxLength": 8},
    "oversized repetition": {"type": "string", "pattern": "^a{1,100000}$", "maxLength": 3},
    "$ref inside enum data": {"enum": [{"$ref": "#/nowhere"}, 1]},
}


@pytest.mark.parametrize("name", list(ONCE_FATAL))
def test_a_schema_that_once_failed_is_answered_and_the_server_keeps_serving(
    sdk: openai.OpenAI, name: str
) -> None:
    schema = ONCE_FATAL[name]
    for stream in (False, True):
        try:
            text, finish = _ask(sdk, "tiny", schema, seed=7, stream=stream)
        except openai.BadRequestError as caught:
            assert caught.status_code == 400
        else:
            assert finish == "stop", text
            _validate(schema, text)
        _still_serving(sdk)


# One schema per kind of constraint; each answer that completes must validate.
CONSTRAINED = {
    "integer range": {"type": "integer", "minimum": 2, "maximum": 25},
    "exclusive integer bounds": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 300},
    "number range": {"type": "number", "minimum": -1.5, "maximum": 2.25},
    "string lengths": {"type": "string", "minLength": 2, "maxLength": 5},
    "pattern": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,3}$"},
    **{f"format {key}": {"type": "string", "format": key} for key in ("date", "time", "date-time", "uuid")},
    "format email": {"type": "string", "format": "email", "maxLength": 16},
    "enum and const": {
        "type": "array",
        "prefixItems": [{"enum": ["red", 3, None, {"a": [1]}]}, {"const": "x\ty"}],
        "items": False,
        "minItems": 2,
    },
    "array bounds without items": {"type": "array", "maxItems": 2},
    "array bounds": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
    "required and additionalProperties": {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}},
        "required": ["a"],
        "additionalProperties": False,
    },
    "branches without a type": {
        "anyOf": [{"const": 1}, {"enum": ["x", "y"]}, {"type": "boolean"}],
    },
    "oneOf": {"oneOf": [{"type": "integer", "maximum": -1}, {"type": "string", "maxLength": 3}]},
    "allOf": {"allOf": [{"type": "string"}, {"maxLength": 3}, {"minLength": 1}]},
    "recursive $ref": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer", "minimum": 0, "maximum": 3},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 1},
                },
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "refs into prefixItems and nested $defs": {
        "type": "array",
        "prefixItems": [
            {"type": "integer", "minimum": 5, "maximum": 6},
            {"$ref": "#/prefixItems/0"},
            {"$ref": "#/$defs/outer/$defs/inner"},
        ],
        "items": False,
        "minItems": 3,
        "$defs": {"outer": {"$defs": {"inner": {"const": "in"}}}},
    },
    "a property named $ref": {
        "type": "object",
        "properties": {"$ref": {"type": "string", "maxLength": 4}},
        "required": ["$ref"],
        "additionalProperties": False,
    },
}


# A number's fraction has no length limit in JSON Schema: a random model may write digits until
# max_tokens. Its answers are checked when cut off, too: the number written so far, its last
# character dropped while it is no number yet (`1.`), must already be in range.
UNBOUNDED = {"number range"}


@pytest.mark.parametrize("name", list(CONSTRAINED))
@pytest.mark.parametrize("model", MODELS)
def test_every_completed_answer_keeps_the_schema(sdk: openai.OpenAI, model: str, name: str) -> None:
    schema = CONSTRAINED[name]
    completed = 0
    for seed in range(3):
        for stream in (False, True):
            text, finish = _ask(sdk, model, schema, seed=seed, stream=stream)
            if finish == "length" and name in UNBOUNDED:
                _validate(schema, text.rstrip(".eE+-"))
                completed += 1
            elif finish != "length":  # cut off by max_tokens: nothing was promised
                assert finish == "stop"
                _validate(schema, text)
                completed += 1
    assert completed >= 3  # the grammar closes these well within the budget


class Person(BaseModel):
    name: str = Field(max_length=10)
    age: int = Field(ge=0, le=150)
    height: float = Field(gt=0.5, lt=2.5)


def test_parse_with_bounded_fields(sdk: openai.OpenAI) -> None:
    """The issue's own case: ages of 151 and -2 came back, and `parse()` raised."""
    for seed in range(4):
        completion = sdk.chat.completions.parse(
            model="tiny",
            messages=[{"role": "user", "content": "Who?"}],
            response_format=Person,
            max_tokens=BUDGET,
            seed=seed,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        person = choice.message.parsed
        assert isinstance(person, Person) and 0 <= person.age <= 150
    with sdk.chat.completions.stream(
        model="tiny-batched",
        messages=[{"role": "user", "content": "Who?"}],
        response_format=Person,
        max_tokens=BUDGET,
        seed=9,
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Person)


def test_an_unenforceable_keyword_is_a_400_naming_it(sdk: openai.OpenAI) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 3}
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            response_format=_fmt(schema),
            max_tokens=8,
        )
    assert "uniqueItems" in str(caught.value)
    assert caught.value.code == "unsupported_json_schema_keyword"


def test_strict_false_is_best_effort_and_says_so(structured_server: Server) -> None:
    weird = "uniqueItems"
    schema = {"type": "array", "items": {"type": "integer", "maximum": 5}, weird: True, "maxItems": 3}
    schema["x\r\nInjected: 1"] = 1  # an unknown keyword: client text that must not reach a header raw
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "x"}],
        "response_format": _fmt(schema, strict=False),
        "max_tokens": BUDGET,
        "seed": 3,
    }
    reply = httpx.post(structured_server.api_url + "/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    header = reply.headers["x-sluicegate-structured-output"]
    assert header.startswith("best-effort; ignored=") and "uniqueItems" in header
    assert "injected" not in {k.lower() for k in reply.headers}
    assert "\r" not in header and "\n" not in header
    content = reply.json()["choices"][0]["message"]["content"]
    if reply.json()["choices"][0]["finish_reason"] == "stop":
        value = json.loads(content)
        assert isinstance(value, list) and len(value) <= 3 and all(v <= 5 for v in value)
    strict = httpx.post(
        structured_server.api_url + "/chat/completions",
        json={**body, "response_format": _fmt({"type": "integer"})},
        timeout=120,
    )
    assert "x-sluicegate-structured-output" not in strict.headers


def test_pydantic_ai_structured_output(structured_server: Server) -> None:
    """pydantic-ai's native structured output (a `json_schema` response format) and its default
    (a forced `final_result` tool call): both come back validated, bounds kept."""
    from pydantic_ai import Agent, NativeOutput, ToolOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=structured_server.api_url, api_key="unused")
    profile = OpenAIModelProfile(supports_json_schema_output=True, supports_json_object_output=True)
    model = OpenAIChatModel("tiny", provider=provider, profile=profile)
    settings: Any = {"max_tokens": BUDGET, "seed": 1}
    for output in (NativeOutput(Person), ToolOutput(Person)):
        agent: Any = Agent(model, output_type=output, model_settings=settings, retries=0)
        person = agent.run_sync("Who?").output
        assert isinstance(person, Person) and 0 <= person.age <= 150 and 0.5 < person.height < 2.5
