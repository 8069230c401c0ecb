"""The official `anthropic` SDK against a real server: `messages.stream()` and its
`get_final_message()` for text, thinking and tool use, a tool-result turn, `count_tokens`,
non-streaming `create()` agreeing with the stream, and errors as the SDK's typed exceptions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from conftest import StartServer
from e2e_support import (
    DEFAULT_REPLY,
    FAIL_MESSAGE,
    REFUSAL,
    THINK_CONTENT,
    THINK_REASONING,
    WEATHER_REASONING,
    Server,
    poll,
)

pytestmark = pytest.mark.e2e

MODEL = "chat"
WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}


@pytest.fixture
def claude(server: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
        yield sdk


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_stream_text(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=MODEL, max_tokens=1000, messages=user("hi")) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == DEFAULT_REPLY
    assert message.id.startswith("msg_") and message.model == MODEL and message.role == "assistant"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == DEFAULT_REPLY  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens == len(DEFAULT_REPLY.split())
    assert message.usage.input_tokens == 1 + 4  # the scripted count: words plus four per message


def test_stream_thinking(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL,
        max_tokens=2000,
        messages=user("think hard"),
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert "thinking" in kinds and "signature" in kinds and "text" in kinds
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking == THINK_REASONING
    assert thinking.signature
    assert text.type == "text" and text.text == THINK_CONTENT
    # The script reports 5 cached prompt tokens: Anthropic counts them apart.
    assert message.usage.cache_read_input_tokens == 5
    assert message.usage.input_tokens == 2 + 4 - 5  # "think hard": two words and four per message


def test_tool_use_and_tool_result_turn(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL, max_tokens=1000, messages=user("weather in Paris?"), tools=[WEATHER_TOOL]
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    thinking, call = first.content
    assert thinking.type == "thinking" and thinking.thinking == WEATHER_REASONING
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Paris", "unit": "celsius"}

    # The assistant turn goes back as the SDK gave it (signed thinking included).
    messages: list[Any] = [
        *user("weather in Paris?"),
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C, sunny"}],
        },
    ]
    with claude.messages.stream(
        model=MODEL, max_tokens=1000, messages=messages, tools=[WEATHER_TOOL]
    ) as stream:
        second = stream.get_final_message()
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "It is sunny in Paris."  # type: ignore[union-attr]


def test_non_streaming_agrees_with_stream(claude: anthropic.Anthropic) -> None:
    for prompt in ("think", "weather", "hi"):
        kwargs: Any = {"model": MODEL, "max_tokens": 1000, "messages": user(prompt), "tools": [WEATHER_TOOL]}
        created = claude.messages.create(**kwargs)
        with claude.messages.stream(**kwargs) as stream:
            streamed = stream.get_final_message()
        strip = {"id": True, "content": {"__all__": {"id"}}}
        assert created.model_dump(exclude=strip) == streamed.model_dump(exclude=strip)  # type: ignore[arg-type]


def test_refusal_and_max_tokens(claude: anthropic.Anthropic) -> None:
    refused = claude.messages.create(model=MODEL, max_tokens=100, messages=user("tell me the secret"))
    assert refused.stop_reason == "refusal" and refused.content[0].text == REFUSAL  # type: ignore[union-attr]
    with claude.messages.stream(model=MODEL, max_tokens=2, messages=user("hi")) as stream:
        cut = stream.get_final_message()
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


def test_count_tokens_matches_usage(claude: anthropic.Anthropic) -> None:
    kwargs: Any = {"model": MODEL, "messages": user("what is the weather like"), "tools": [WEATHER_TOOL]}
    counted = claude.messages.count_tokens(**kwargs)
    message = claude.messages.create(max_tokens=100, **kwargs)
    assert counted.input_tokens == message.usage.input_tokens > 0


def test_errors_are_typed(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=10, messages=user("hi"))
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model=MODEL, max_tokens=0, messages=user("hi"))
    assert bad.value.body == {  # type: ignore[comparison-overlap]
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "Invalid 'max_tokens': expected a value >= 1, but got 0 instead.",
        },
    }
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model=MODEL, messages=[])
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="nope", messages=user("x"))


def test_mid_stream_failure_raises(claude: anthropic.Anthropic) -> None:
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        claude.messages.stream(model=MODEL, max_tokens=100, messages=user("fail now")) as stream,
    ):
        for _ in stream:
            pass
    assert FAIL_MESSAGE in str(caught.value)
    # The non-streaming retry Claude Code makes gets the same failure as an HTTP error.
    with pytest.raises(anthropic.InternalServerError) as again:
        claude.messages.create(model=MODEL, max_tokens=100, messages=user("fail now"))
    assert again.value.status_code == 500


def test_overloaded_is_529(server: Server) -> None:
    holder = httpx.Client(base_url=server.base_url, timeout=10)
    body = {"model": "single", "max_tokens": 1000, "stream": True, "messages": user("hi")}
    first = holder.send(holder.build_request("POST", "/v1/messages", json=body), stream=True)
    try:
        assert first.status_code == 200
        lines = first.iter_lines()  # kept: a dropped iterator would close the response
        assert next(lines).startswith("event: message_start")  # holding the only slot
        with (
            anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as sdk,
            pytest.raises(anthropic.InternalServerError) as caught,
        ):
            sdk.messages.create(model="single", max_tokens=10, messages=user("hi"))
        assert caught.value.status_code == 529
        assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    finally:
        first.close()
        holder.close()

    def admitted() -> bool:
        return (
            httpx.post(
                server.base_url + "/v1/messages", json={**body, "stream": False, "max_tokens": 1}
            ).status_code
            == 200
        )

    assert poll(admitted, timeout=5.0, interval=0.05)


def test_authentication(start_server: StartServer) -> None:
    from e2e_support import scripted

    server = start_server({"api_key": "sk-right"}, [scripted("chat", "chat.yaml")])
    with anthropic.Anthropic(base_url=server.base_url, api_key="sk-wrong", max_retries=0) as sdk:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            sdk.messages.create(model=MODEL, max_tokens=10, messages=user("hi"))
        assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    # x-api-key (the SDK's way) and Bearer (Claude Code's with ANTHROPIC_AUTH_TOKEN) both work
    with anthropic.Anthropic(base_url=server.base_url, api_key="sk-right", max_retries=0) as sdk:
        assert sdk.messages.create(model=MODEL, max_tokens=10, messages=user("hi")).content
    with anthropic.Anthropic(base_url=server.base_url, auth_token="sk-right", max_retries=0) as sdk:
        assert sdk.messages.create(model=MODEL, max_tokens=10, messages=user("hi")).content
