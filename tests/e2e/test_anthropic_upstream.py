"""`engine = "anthropic"`: a real server in front of the fake Anthropic upstream
(tests/fakes/fake_anthropic.py), driven by the `openai` SDK in Chat Completions and Responses
(thinking arrives as reasoning, tools round-trip) and by the `anthropic` SDK (thinking signatures
survive the trip through Sluicegate's own), with usage, errors and disconnects as every upstream
engine has them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from fake_anthropic import FakeAnthropic, Scenario, message, overloaded

pytestmark = pytest.mark.e2e

KEY = "sk-upstream-secret"
THINKING = "The user wants weather."
SIGNATURE = "sig-from-upstream-0001"
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_USE = {"type": "tool_use", "id": "toolu_fake01", "name": "get_weather", "input": {"city": "Paris"}}

SCENARIOS = {
    "think": Scenario(
        frames=message(
            [
                {"type": "thinking", "thinking": "Greeting noted.", "signature": "sig-think"},
                {"type": "text", "text": "Hi there"},
            ],
            input_tokens=4,
            cache_read=16,
            output_tokens=7,
        )
    ),
    "tools": Scenario(
        frames=message(
            [{"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}, TOOL_USE],
            stop_reason="tool_use",
        )
    ),
    "answer": Scenario(frames=message([{"type": "text", "text": "Sunny in Paris."}])),
    "overloaded-529": Scenario(
        status=529, body=b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    ),
    "mid-error": Scenario(
        frames=[*message([{"type": "text", "text": "Partial answer here"}])[:5], overloaded()]
    ),
    "no-stop": Scenario(frames=message([{"type": "text", "text": "cut"}])[:4]),
    "stall": Scenario(frames=[*message([{"type": "text", "text": "one"}])[:3], None]),
    "refusal": Scenario(frames=message([{"type": "text", "text": "I cannot."}], stop_reason="refusal")),
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(name="claude-up") as upstream:
        upstream.scenarios.update(SCENARIOS)
        yield upstream


def table(model_id: str, fake: FakeAnthropic, scenario: str) -> dict[str, Any]:
    return {
        "id": model_id,
        "engine": "anthropic",
        "base_url": fake.base_url,
        "api_key": KEY,
        "upstream_model": scenario,
        "reasoning": True,
        "health_check_interval": 0,
    }


@pytest.fixture(scope="module")
def server(start_server: StartServer, fake: FakeAnthropic) -> Server:
    models = [table(name, fake, name) for name in SCENARIOS]
    return start_server({}, models)


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0, timeout=30) as sdk:
        yield sdk


def last_request(fake: FakeAnthropic, model: str) -> dict[str, Any]:
    body: dict[str, Any] = fake.chat_requests(model)[-1].body
    return body


def test_chat_completions_thinking_is_reasoning(client: openai.OpenAI, fake: FakeAnthropic) -> None:
    chunks = list(
        client.chat.completions.create(
            model="think",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=500,
            temperature=0.2,
        )
    )
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (reasoning, content) == ("Greeting noted.", "Hi there")
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (20, 7)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 16
    observed = fake.chat_requests("think")[-1]
    assert observed.path == "/v1/messages"
    assert observed.headers["x-api-key"] == KEY and "authorization" not in observed.headers
    assert observed.headers["anthropic-version"] == "2023-06-01"
    sent = observed.body
    assert sent["system"] == "Be brief."
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert sent["stream"] is True and sent["max_tokens"] == 500 and sent["temperature"] == 0.2


def test_chat_completions_tools_round_trip(client: openai.OpenAI, fake: FakeAnthropic) -> None:
    first = client.chat.completions.create(
        model="tools",
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER],
        reasoning_effort="low",
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.id == "toolu_fake01" and call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert getattr(choice.message, "reasoning_content", None) == THINKING
    sent = last_request(fake, "tools")
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER["function"]["parameters"],
            "description": "Weather for a city",
        }
    ]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}

    client.chat.completions.create(
        model="answer",
        reasoning_effort="low",
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": THINKING,  # type: ignore[typeddict-unknown-key]
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": call.function.arguments},
                    }
                ],  # type: ignore[union-attr]
            },
            {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"},
        ],
    )
    sent = last_request(fake, "answer")
    # the upstream gets its own signature back with the thinking, so thinking stays on
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "tool_use", "id": "toolu_fake01", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    }
    assert sent["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_fake01", "content": "18C and sunny"}],
    }
    assert sent["thinking"]["type"] == "enabled"


def test_responses_reasoning_and_function_call(client: openai.OpenAI, fake: FakeAnthropic) -> None:
    with client.responses.stream(
        model="tools", input="weather?", tools=[{"type": "function", **WEATHER["function"]}]
    ) as stream:
        response = stream.get_final_response()
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call"]
    reasoning = response.output[0]
    assert reasoning.content and reasoning.content[0].text == THINKING  # type: ignore[union-attr]
    call = response.output[1]
    assert call.call_id == "toolu_fake01" and json.loads(call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    follow = client.responses.create(
        model="answer",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": "toolu_fake01", "output": "18C"}],
        tools=[{"type": "function", **WEATHER["function"]}],
    )
    assert follow.output_text == "Sunny in Paris."
    sent = last_request(fake, "answer")
    assert sent["messages"][-1]["content"][0]["type"] == "tool_result"
    assert sent["messages"][-2]["content"][-1]["type"] == "tool_use"


def test_anthropic_sdk_through_anthropic_engine(server: Server, fake: FakeAnthropic) -> None:
    with anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as sdk:
        tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
        with sdk.messages.stream(
            model="tools",
            max_tokens=4000,
            messages=[{"role": "user", "content": "weather?"}],
            tools=[tool],  # type: ignore[list-item]
            thinking={"type": "enabled", "budget_tokens": 2000},
        ) as stream:
            first = stream.get_final_message()
        thinking = first.content[0]
        assert thinking.type == "thinking" and thinking.thinking == THINKING
        assert thinking.signature != SIGNATURE  # ours, not the upstream's
        sdk.messages.create(
            model="answer",
            max_tokens=4000,
            thinking={"type": "enabled", "budget_tokens": 2000},
            tools=[tool],  # type: ignore[list-item]
            messages=[
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_fake01", "content": "18C"}],
                },
            ],
        )
    sent = last_request(fake, "answer")
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THINKING,
        "signature": SIGNATURE,
    }


def test_refusal_and_errors(client: openai.OpenAI, server: Server) -> None:
    refused = client.chat.completions.create(model="refusal", messages=[{"role": "user", "content": "x"}])
    assert refused.choices[0].finish_reason == "content_filter"
    with pytest.raises(openai.InternalServerError) as busy:
        client.chat.completions.create(model="overloaded-529", messages=[{"role": "user", "content": "x"}])
    assert busy.value.status_code == 503
    with (
        anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as sdk,
        pytest.raises(anthropic.InternalServerError) as again,
    ):
        sdk.messages.create(
            model="overloaded-529", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert again.value.status_code == 529
    with pytest.raises(openai.APIError) as mid:
        list(
            client.chat.completions.create(
                model="mid-error", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    assert "Overloaded" in str(mid.value)
    with pytest.raises(openai.APIError) as cut:
        list(
            client.chat.completions.create(
                model="no-stop", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    assert "before it finished" in str(cut.value)


def test_disconnect_closes_the_upstream(server: Server, fake: FakeAnthropic) -> None:
    before = len(fake.chat_requests("stall"))
    payload = json.dumps(
        {"model": "stall", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        fake.wait_for(lambda: len(fake.chat_requests("stall")) > before)
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
    observed = fake.chat_requests("stall")[-1]
    fake.wait_for(lambda: observed.disconnected_at is not None, timeout=10)
    assert observed.finished is False
