"""Chat Completions with configured MCP servers, driven by the openai SDK: their tools are offered
to the model and run server-side; the client sees every round's text and only its own calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from e2e_support import Server, chat_body, stream_raw
from tools_support import MAX_ROUNDS, MODEL, tools_server

from mcp_fixtures import mcp_http_server

pytestmark = pytest.mark.e2e
__all__ = ["mcp_http_server", "tools_server"]  # fixtures, imported for pytest

WEATHER = "What is the weather in Paris?"
ANSWER = "It is 18°C with light rain in Paris."


@pytest.fixture
def client(tools_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=tools_server.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
        yield sdk


def function(name: str) -> Any:
    parameters = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


def test_an_mcp_tool_runs_server_side_in_the_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=user(WEATHER), stream_options={"include_usage": True}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.message.content == ANSWER, "the model answered from the tool's result"
    assert choice.message.reasoning_content == "I should look it up."  # type: ignore[attr-defined]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert "tool_calls.function.arguments.delta" not in kinds
    assert final.usage is not None and final.usage.completion_tokens == 5 + 2 + 8, "both rounds"


def test_the_wire_has_no_server_tool_calls(tools_server: Server) -> None:
    raw = stream_raw(tools_server.base_url, chat_body(MODEL, WEATHER, stream=True))
    deltas = [chunk["choices"][0]["delta"] for chunk in raw.chunks if chunk["choices"]]
    assert not any("tool_calls" in delta for delta in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == ANSWER
    assert [d.get("role") for d in deltas].count("assistant") == 1


def test_non_streaming_gets_the_final_answer(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=user(WEATHER))
    choice = completion.choices[0]
    assert choice.message.content == ANSWER
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"


def test_mixed_calls_show_the_client_only_its_own(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=user("mixed calls please"), tools=[function("get_time")]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"zone": "UTC"}
    assert choice.message.content == "Both at once."
    # The client runs its function and continues; the model answers from there.
    follow_up = client.chat.completions.create(
        model=MODEL,
        messages=[
            *user("mixed calls please"),
            {"role": "assistant", "content": "Both at once.", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "12:00"},
        ],
        tools=[function("get_time")],
    )
    assert follow_up.choices[0].message.content == "Done."


def test_a_request_function_wins_a_name_clash(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=user("Add these in parallel"), tools=[function("add")]
    )
    choice = completion.choices[0]
    # `add` is the client's now; `web_add` still ran on the server, out of sight.
    assert [c.function.name for c in choice.message.tool_calls or []] == ["add"]
    assert choice.finish_reason == "tool_calls"


def test_the_round_limit_is_an_error_that_says_why(client: openai.OpenAI, tools_server: Server) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=MODEL, messages=user("Please loop forever"))
    assert caught.value.code == "max_tool_rounds"
    assert f"{MAX_ROUNDS} tool rounds" in caught.value.message
    raw = stream_raw(tools_server.base_url, chat_body(MODEL, "Please loop forever", stream=True))
    (error,) = [frame for frame in raw.frames if frame.event == "error"]
    assert error.json()["error"]["code"] == "max_tool_rounds"
    assert raw.frames[-1].is_done
