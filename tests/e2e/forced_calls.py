"""A forced tool call through each SDK's stream helper, as the family e2e tests make it:
`tool_choice` required (openai) or `any` (anthropic), one `get_weather` tool with the test's
schema. Each returns the call's arguments, checked against the schema, and how many pieces
the arguments streamed in."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import openai
from e2e_support import Server


def openai_forced_call(server: Server, model: str, ask: list[Any], schema: dict[str, Any]) -> int:
    """The call through Chat Completions; its argument pieces."""
    tools: list[Any] = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        pieces = 0
        with sdk.chat.completions.stream(
            model=model, messages=ask, tools=tools, tool_choice="required", max_tokens=300, seed=3
        ) as events:
            for event in events:
                if event.type == "tool_calls.function.arguments.delta":
                    pieces += 1
            completion = events.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), schema)
    return pieces


def anthropic_forced_call(server: Server, model: str, ask: list[Any], schema: dict[str, Any]) -> int:
    """The call through Anthropic Messages; its `input_json_delta` pieces."""
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        pieces = 0
        with sdk.messages.stream(
            model=model,
            messages=ask,
            tools=[{"name": "get_weather", "input_schema": schema}],
            tool_choice={"type": "any"},
            max_tokens=300,
        ) as events:
            for event in events:
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    pieces += 1
            message = events.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "get_weather"
    jsonschema.validate(block.input, schema)
    return pieces
