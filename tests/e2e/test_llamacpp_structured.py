"""Grammar-constrained decoding on real llama.cpp: JSON output and forced tool calls.

The tiny model has random weights and, left alone, never ends a reply (`ends_replies=False`):
whatever shape comes out is the grammar's doing. Every answer must parse and validate against
its schema, through the openai SDK's own structured-output helpers, streaming and not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from e2e_support import Server
from pydantic import BaseModel, Field

pytestmark = pytest.mark.e2e

MODEL = "tiny"
THINKING = "tiny-think"
BUDGET = 400  # enough for the grammar to close every object below


class Weather(BaseModel):
    city: str = Field(max_length=12)
    temperature: int
    sky: Literal["sunny", "cloudy", "rain"]
    windy: bool


WEATHER_TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME_TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}, "hours": {"type": "integer"}},
    "required": ["zone", "hours"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER_TOOL, "get_time": TIME_TOOL}
CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in SCHEMAS.items()
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": name, "parameters": schema, "strict": True}
    for name, schema in SCHEMAS.items()
]
ASK = [{"role": "user", "content": "What is the weather in Paris today?"}]


@pytest.fixture
def sdk(llama_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llama_server.api_url, api_key="unused", max_retries=0, timeout=120.0
    ) as client:
        yield client


def _valid_weather(parsed: Weather | None) -> Weather:
    assert isinstance(parsed, Weather)
    jsonschema.validate(parsed.model_dump(), Weather.model_json_schema())
    return parsed


def test_chat_completions_parse(sdk: openai.OpenAI) -> None:
    completion = sdk.chat.completions.parse(
        model=MODEL, messages=ASK, response_format=Weather, max_tokens=BUDGET, seed=1
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    _valid_weather(choice.message.parsed)


def test_chat_completions_stream_parse(sdk: openai.OpenAI) -> None:
    deltas = 0
    with sdk.chat.completions.stream(
        model=MODEL, messages=ASK, response_format=Weather, max_tokens=BUDGET, seed=2
    ) as stream:
        for event in stream:
            deltas += event.type == "content.delta"
        final = stream.get_final_completion()
    assert deltas > 3  # streamed token by token, not in one piece
    assert final.choices[0].finish_reason == "stop"
    _valid_weather(final.choices[0].message.parsed)


def test_json_object_mode(sdk: openai.OpenAI) -> None:
    """Any JSON object: its keys and strings are unbounded, so a random model often runs out of
    tokens first (finish `length`, a cut object). Seeds until one closes; every reply is JSON
    from its first character."""
    for seed in range(12):
        reply = sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Answer in JSON."}],
            response_format={"type": "json_object"},
            max_tokens=BUDGET,
            seed=seed,
            temperature=1.5,
        )
        content = reply.choices[0].message.content or ""
        assert content.startswith("{")
        if reply.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(content), dict)
            return
        assert reply.choices[0].finish_reason == "length"
    pytest.fail("no seed closed its JSON object within max_tokens")


def test_responses_parse_and_stream(sdk: openai.OpenAI) -> None:
    response = sdk.responses.parse(
        model=MODEL, input="Weather in Rome?", text_format=Weather, max_output_tokens=BUDGET
    )
    assert response.status == "completed"
    _valid_weather(response.output_parsed)
    with sdk.responses.stream(
        model=MODEL, input="Weather in Oslo?", text_format=Weather, max_output_tokens=BUDGET
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.output_text.delta") > 3
    _valid_weather(final.output_parsed)


def test_a_cut_off_answer_finishes_with_length(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        sdk.chat.completions.parse(model=MODEL, messages=ASK, response_format=Weather, max_tokens=5)


def _check_call(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_forced_tool_calls(sdk: openai.OpenAI, stream: bool) -> None:
    for choice, expected in (
        ("required", set(SCHEMAS)),
        ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
    ):
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "messages": ASK,
            "tools": CHAT_TOOLS,
            "tool_choice": choice,
            "max_tokens": BUDGET,
        }
        if stream:
            with sdk.chat.completions.stream(**kwargs) as events:
                for _ in events:
                    pass
                completion = events.get_final_completion()
        else:
            completion = sdk.chat.completions.create(**kwargs)
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "tool_calls"
        assert message.tool_calls and len(message.tool_calls) == 1
        call = message.tool_calls[0]
        assert call.type == "function" and call.function.name in expected
        _check_call(call.function.name, call.function.arguments)


def final_response(sdk: openai.OpenAI, stream: bool, kwargs: dict[str, Any]) -> Any:
    """The finished response, streamed through the SDK's helper or not."""
    if not stream:
        return sdk.responses.create(**kwargs)
    with sdk.responses.stream(**kwargs) as events:
        for _ in events:
            pass
        return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_responses_forced_tool_calls(sdk: openai.OpenAI, stream: bool) -> None:
    for choice, expected in (
        ("required", set(SCHEMAS)),
        ({"type": "function", "name": "get_weather"}, {"get_weather"}),
    ):
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "input": "Weather?",
            "tools": RESPONSES_TOOLS,
            "tool_choice": choice,
            "max_output_tokens": BUDGET,
        }
        response = final_response(sdk, stream, kwargs)
        calls = [item for item in response.output if item.type == "function_call"]
        assert response.status == "completed" and len(calls) == 1
        assert calls[0].name in expected
        _check_call(calls[0].name, calls[0].arguments)


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_custom_tool_call_matches_its_regex(sdk: openai.OpenAI, stream: bool) -> None:
    """A `custom` tool with a regex grammar (issue 20): llama.cpp constrains the forced call's
    free-form input to it, whatever the random weights would have written."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": "Open a ticket.",
        "tools": [
            {
                "type": "custom",
                "name": "ticket",
                "description": "Opens a ticket.",
                "format": {"type": "grammar", "syntax": "regex", "definition": "T-[0-9]{3}-(low|high)"},
            }
        ],
        "tool_choice": {"type": "custom", "name": "ticket"},
        "max_output_tokens": BUDGET,
    }
    response = final_response(sdk, stream, kwargs)
    calls = [item for item in response.output if item.type == "custom_tool_call"]
    assert response.status == "completed" and len(calls) == 1
    assert calls[0].name == "ticket"
    assert re.fullmatch(r"T-[0-9]{3}-(low|high)", calls[0].input), calls[0].input


def test_reasoning_comes_first_then_the_grammar(sdk: openai.OpenAI) -> None:
    """A model whose prompt opens `<think>` reasons freely; the grammar starts after `</think>`."""
    completion = sdk.chat.completions.parse(
        model=THINKING, messages=ASK, response_format=Weather, max_tokens=BUDGET, seed=4
    )
    message = completion.choices[0].message
    reasoning = getattr(message, "reasoning_content", None) or (message.model_extra or {}).get(
        "reasoning_content"
    )
    assert reasoning  # free text from the reasoning block
    _valid_weather(message.parsed)
    with sdk.chat.completions.stream(
        model=THINKING, messages=ASK, tools=CHAT_TOOLS, tool_choice="required", max_tokens=BUDGET, seed=5
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert len(calls) == 1
    _check_call(calls[0].function.name, calls[0].function.arguments)


def test_a_schema_the_grammar_cannot_express_is_a_400(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=8,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}},
            },
        )
    assert caught.value.code == "invalid_json_schema"
