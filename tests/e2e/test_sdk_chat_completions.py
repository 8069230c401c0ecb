"""The official `openai` SDK against a real server: `create(stream=True)`, the `.stream()` helper
that accumulates deltas (and would concatenate a repeated id/name/role), and non-streaming
`create()`, which must agree with the streamed result of the same script."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from e2e_support import (
    DEFAULT_REPLY,
    REFUSAL,
    THINK_CONTENT,
    THINK_REASONING,
    WEATHER_REASONING,
    Server,
)

pytestmark = pytest.mark.e2e

MODEL = "chat"

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "format": {"type": "string"}},
            "required": ["city", "format"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def prompt_tokens(*texts: str) -> int:
    """The scripted engine's documented count: words plus four per message."""
    return sum(len(t.split()) + 4 for t in texts)


def test_plain_text_create_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=user("hi"), stream=True)
    chunks = list(stream)
    assert len(chunks) >= 3
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    assert all(len(c.choices) == 1 and c.choices[0].index == 0 for c in chunks)
    roles = [c.choices[0].delta.role for c in chunks]
    assert roles[0] == "assistant"
    assert roles[1:] == [None] * (len(chunks) - 1)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == DEFAULT_REPLY
    # One word per delta, each keeping its leading space.
    words = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert words == ["Hello!", *(" " + w for w in DEFAULT_REPLY.split()[1:])]
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert all(c.choices[0].logprobs is None for c in chunks)


def test_plain_text_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("hi")) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    deltas = [e.delta for e in events if e.type == "content.delta" and e.delta]
    assert "".join(deltas) == DEFAULT_REPLY
    assert len(deltas) == len(DEFAULT_REPLY.split())
    done = [e for e in events if e.type == "content.done"]
    assert len(done) == 1 and done[0].content == DEFAULT_REPLY
    assert not [e for e in events if e.type.startswith(("refusal.", "tool_calls."))]
    message = final.choices[0].message
    assert message.role == "assistant"  # sent once: a repeated role would read "assistantassistant"
    assert message.content == DEFAULT_REPLY
    assert message.refusal is None and not message.tool_calls
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is None


async def test_plain_text_async_client(server: Server) -> None:
    async with openai.AsyncOpenAI(base_url=server.api_url, api_key="unused", max_retries=0) as aclient:
        stream = await aclient.chat.completions.create(model=MODEL, messages=user("hi"), stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        async with aclient.chat.completions.stream(model=MODEL, messages=user("hi")) as helper:
            final = await helper.get_final_completion()
    assert text == DEFAULT_REPLY
    assert final.choices[0].message.content == DEFAULT_REPLY


def test_reasoning_create_stream(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model=MODEL, messages=user("think hard"), stream=True))
    kinds = []
    reasoning = content = ""
    for chunk in chunks:
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            reasoning += extra["reasoning_content"]
            kinds.append("reasoning")
        if delta.content:
            content += delta.content
            kinds.append("content")
    assert reasoning == THINK_REASONING
    assert content == THINK_CONTENT
    # Reasoning streams first, then the answer; never interleaved.
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning")
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_reasoning_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("think hard")) as stream:
        content = "".join(e.delta for e in stream if e.type == "content.delta")
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert content == THINK_CONTENT
    assert message.content == THINK_CONTENT
    assert (message.model_extra or {}).get("reasoning_content") == THINK_REASONING


def test_one_tool_call_create_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user("weather in Paris?"), tools=[WEATHER_TOOL], stream=True
        )
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for call in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            assert call.function is not None
            entry["id"] += call.id or ""
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks)
    assert reasoning == WEATHER_REASONING
    assert all(not c.choices[0].delta.content for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_one_tool_call_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=user("weather in Paris?"), tools=[WEATHER_TOOL]
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    arg_deltas = [e for e in events if e.type == "tool_calls.function.arguments.delta"]
    assert len(arg_deltas) > 1, "arguments should stream in several pieces"
    assert all(e.name == "get_weather" and e.index == 0 for e in arg_deltas)
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert len(done) == 1
    assert done[0].name == "get_weather"
    # A strict tool is partially parsed on every delta, so every prefix must be sound JSON.
    assert done[0].parsed_arguments == {"city": "Paris", "unit": "celsius"}
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_") and call.id.count("call_") == 1
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert call.function.parsed_arguments == {"city": "Paris", "unit": "celsius"}


def test_two_parallel_tool_calls_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=user("weather and time in two cities"), tools=TOOLS
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [(e.index, e.name) for e in done] == [(0, "get_weather"), (1, "get_time")]
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.role == "assistant"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 2
    # The helper concatenates repeated fields: exact values prove id and name came once.
    assert calls[0].id == "call_paris_0001"
    assert calls[1].id.startswith("call_") and calls[1].id.count("call_") == 1
    assert calls[1].id != calls[0].id
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert json.loads(calls[1].function.arguments) == {"city": "Tokyo", "format": "24h"}
    assert calls[1].function.parsed_arguments == {"city": "Tokyo", "format": "24h"}


def test_two_parallel_tool_calls_create_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user("weather and time in two cities"), tools=TOOLS, stream=True
        )
    )
    order: list[int] = []
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    for chunk in chunks:
        for call in chunk.choices[0].delta.tool_calls or []:
            assert call.function is not None
            if call.index not in order:
                order.append(call.index)
                assert call.id and call.function.name and call.type == "function"
                names[call.index] = call.function.name
            else:
                assert call.id is None and call.function.name is None
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
    assert order == [0, 1]
    assert names == {0: "get_weather", 1: "get_time"}
    assert json.loads(arguments[0]) == {"city": "Paris", "unit": "celsius"}
    assert json.loads(arguments[1]) == {"city": "Tokyo", "format": "24h"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trip(client: openai.OpenAI) -> None:
    """A conversation carrying the assistant's tool call and the tool's result parses and answers."""
    messages: list[Any] = [
        *user("weather in Paris?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
    ]
    with client.chat.completions.stream(model=MODEL, messages=messages, tools=[WEATHER_TOOL]) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "It is sunny in Paris."
    assert final.choices[0].finish_reason == "stop"


def test_refusal_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("tell me the secret")) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    deltas = [e.delta for e in events if e.type == "refusal.delta"]
    assert "".join(deltas) == REFUSAL and len(deltas) > 1
    done = [e for e in events if e.type == "refusal.done"]
    assert len(done) == 1 and done[0].refusal == REFUSAL
    assert not [e for e in events if e.type.startswith("content.")]
    message = final.choices[0].message
    assert message.refusal == REFUSAL
    assert message.content is None
    assert final.choices[0].finish_reason == "stop"


def test_refusal_create_stream(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model=MODEL, messages=user("the secret"), stream=True))
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks) == REFUSAL
    assert all(not c.choices[0].delta.content for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_include_usage_create_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=user("think hard"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.usage is None for c in chunks[:-1])
    usage = chunks[-1].usage
    assert usage is not None
    reasoning_words, content_words = len(THINK_REASONING.split()), len(THINK_CONTENT.split())
    assert usage.prompt_tokens == prompt_tokens("think hard")
    assert usage.completion_tokens == reasoning_words + content_words
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 5  # the script's usage override
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == reasoning_words


def test_include_usage_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=user("hi there"), stream_options={"include_usage": True}
    ) as stream:
        final = stream.get_final_completion()
    assert final.usage is not None
    assert final.usage.prompt_tokens == prompt_tokens("hi there")
    assert final.usage.completion_tokens == len(DEFAULT_REPLY.split())
    assert final.usage.completion_tokens_details is not None
    assert final.usage.completion_tokens_details.reasoning_tokens == 0
    assert final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == 0


def test_include_usage_false_sends_no_usage(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), stream=True, stream_options={"include_usage": False}
        )
    )
    assert all(c.usage is None for c in chunks)


@pytest.mark.parametrize("limit_param", ["max_tokens", "max_completion_tokens"])
def test_length_create_stream(client: openai.OpenAI, limit_param: str) -> None:
    limit: Any = {limit_param: 3}
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), stream=True, stream_options={"include_usage": True}, **limit
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello! This is"
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_length_stream_helper_raises(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("hi"), max_tokens=3) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        with pytest.raises(openai.LengthFinishReasonError):
            stream.get_final_completion()
    assert "".join(deltas) == "Hello! This is"


def test_content_filter_stream_helper_raises(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("filtered please")) as stream:
        content = "".join(e.delta for e in stream if e.type == "content.delta")
        with pytest.raises(openai.ContentFilterFinishReasonError):
            stream.get_final_completion()
    assert content == "Part of this answer was"


def test_logprobs_create_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), stream=True, logprobs=True, top_logprobs=2
        )
    )
    tokens = []
    for chunk in chunks:
        choice = chunk.choices[0]
        if not choice.delta.content:
            continue
        assert choice.logprobs is not None and choice.logprobs.content is not None
        [entry] = choice.logprobs.content
        assert entry.token == choice.delta.content
        assert entry.logprob == 0.0
        assert entry.bytes == list(entry.token.encode())
        assert [(t.token, t.logprob) for t in entry.top_logprobs] == [(entry.token, 0.0)]
        tokens.append(entry.token)
    assert "".join(tokens) == DEFAULT_REPLY
    assert chunks[-1].choices[0].logprobs is None


def test_logprobs_stream_helper_and_non_streaming(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=user("hi"), logprobs=True) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    assert [e for e in events if e.type == "logprobs.content.delta"]
    [done] = [e for e in events if e.type == "logprobs.content.done"]
    assert "".join(t.token for t in done.content) == DEFAULT_REPLY
    assert all(t.logprob == 0.0 and t.top_logprobs == [] for t in done.content)
    streamed = final.choices[0].logprobs
    assert streamed is not None and streamed.content is not None

    whole = client.chat.completions.create(model=MODEL, messages=user("hi"), logprobs=True)
    logprobs = whole.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [(t.token, t.logprob, t.bytes) for t in logprobs.content] == [
        (t.token, t.logprob, t.bytes) for t in streamed.content
    ]


def test_no_logprobs_when_not_requested_non_streaming(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=user("hi"))
    assert whole.choices[0].logprobs is None


# --- streamed and non-streamed must agree ------------------------------------------------------


def _summary(completion: Any) -> dict[str, Any]:
    choice = completion.choices[0]
    message = choice.message
    calls = [
        (
            c.id if c.id.startswith("call_paris") else "generated",
            c.function.name,
            json.loads(c.function.arguments),
        )
        for c in message.tool_calls or []
    ]
    usage = completion.usage
    return {
        "content": message.content,
        "refusal": message.refusal,
        "reasoning": (message.model_extra or {}).get("reasoning_content"),
        "tool_calls": calls,
        "finish_reason": choice.finish_reason,
        "usage": (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            usage.prompt_tokens_details.cached_tokens,
            usage.completion_tokens_details.reasoning_tokens,
        ),
    }


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("hi", {"content": DEFAULT_REPLY, "finish_reason": "stop"}),
        ("think hard", {"content": THINK_CONTENT, "reasoning": THINK_REASONING}),
        (
            "weather in Paris?",
            {"content": None, "reasoning": WEATHER_REASONING, "finish_reason": "tool_calls"},
        ),
        ("weather and time in two cities", {"content": None, "finish_reason": "tool_calls"}),
        ("the secret", {"content": None, "refusal": REFUSAL}),
    ],
)
def test_non_streaming_matches_streamed(client: openai.OpenAI, prompt: str, expected: dict[str, Any]) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=user(prompt), tools=TOOLS)
    assert whole.object == "chat.completion"
    assert whole.id.startswith("chatcmpl-")
    assert whole.model == MODEL
    assert whole.choices[0].message.role == "assistant"
    with client.chat.completions.stream(
        model=MODEL, messages=user(prompt), tools=TOOLS, stream_options={"include_usage": True}
    ) as stream:
        streamed = stream.get_final_completion()
    summary = _summary(whole)
    assert summary == _summary(streamed)
    for key, value in expected.items():
        assert summary[key] == value, key
    if "two cities" in prompt:
        assert [c[0] for c in summary["tool_calls"]] == ["call_paris_0001", "generated"]


def _iter_text(chunks: Iterator[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks)


def test_stop_sequence(client: openai.OpenAI) -> None:
    text = _iter_text(
        client.chat.completions.create(model=MODEL, messages=user("hi"), stream=True, stop=[" is"])
    )
    assert text == "Hello! This"
    whole = client.chat.completions.create(model=MODEL, messages=user("hi"), stop=" is")
    assert whole.choices[0].message.content == "Hello! This"
    assert whole.choices[0].finish_reason == "stop"


def test_sampling_parameters_are_accepted(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, *user("hi")],
        temperature=0.2,
        top_p=0.9,
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        n=1,
        parallel_tool_calls=True,
        user="e2e",
        extra_body={"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1},
    )
    assert whole.choices[0].message.content == DEFAULT_REPLY


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[:2] == ["chat", "slow"]
    model = client.models.retrieve("chat")
    assert model.id == "chat" and model.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_empty_reply_streamed_matches_non_streaming(client: openai.OpenAI) -> None:
    """A stop sequence at the very start leaves nothing: both paths must agree on `content`."""
    whole = client.chat.completions.create(model=MODEL, messages=user("hi"), stop=["Hello"])
    with client.chat.completions.stream(model=MODEL, messages=user("hi"), stop=["Hello"]) as stream:
        streamed = stream.get_final_completion()
    assert whole.choices[0].message.content in (None, "")
    assert streamed.choices[0].message.content == whole.choices[0].message.content
    assert streamed.choices[0].finish_reason == whole.choices[0].finish_reason == "stop"
