"""dialects/chat_completions_request.py: the Chat Completions body → ChatRequest, or a 400 naming the parameter."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.request import ContentPart, Message, RequestOptions, ToolCall, ToolSpec
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.engines.model_names import ModelNames

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}

FULL: dict[str, Any] = {
    "model": "my-model",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Dev note."}]},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "What is in "},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
                {"type": "text", "text": "this picture?"},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should call the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ],
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "seed": 42,
    "max_tokens": 100,
    "max_completion_tokens": 50,
    "n": 1,
    "logprobs": True,
    "top_logprobs": 3,
    "stop": ["END", "STOP"],
    "stream": True,
    "stream_options": {"include_usage": True},
    "tools": [WEATHER_TOOL],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "reasoning_effort": "low",
    "response_format": {"type": "json_object"},
    "ttl": 300,
    "cache_prompt": True,
    "user": "someone",  # part of the API but not used: ignored
    "some_provider_extra": {"x": 1},  # unknown: ignored
}


def body(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(FULL)
    for key, value in changes.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


DROP = object()


def minimal(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_full_request_maps_to_chat_request() -> None:
    request, options = parse_chat_request(body())
    assert request.model == "my-model"
    assert options.stream is True
    assert options.include_usage is True
    s = request.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty) == (0.7, 0.9, 40, 0.05, 1.1)
    assert (s.presence_penalty, s.frequency_penalty, s.seed) == (0.5, -0.5, 42)
    assert s.max_tokens == 50  # max_completion_tokens wins over max_tokens
    assert (s.n, s.logprobs, s.top_logprobs) == (1, True, 3)
    assert s.stop == ["END", "STOP"]
    assert request.tools == [
        ToolSpec(
            "get_weather",
            "Weather for a city",
            {"type": "object", "properties": {"city": {"type": "string"}}},
            strict=True,
        )
    ]
    assert request.tool_choice == "required"
    assert request.parallel_tool_calls is False
    assert request.reasoning_effort == "low"
    assert request.response_format == {"type": "json_object"}
    assert request.extra == {"cache_prompt": True}
    assert request.options == RequestOptions(ttl=300)

    system, developer, user, assistant, tool = request.messages
    assert system == Message("system", "Be brief.")
    assert developer.role == "developer" and developer.text == "Dev note."
    assert user.name == "alice"
    assert user.content == [
        ContentPart("text", text="What is in "),
        ContentPart("image", image_url="https://example.com/cat.png"),
        ContentPart("text", text="this picture?"),
    ]
    assert user.text == "What is in this picture?"
    assert assistant.tool_calls == [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]
    assert assistant.reasoning == "I should call the tool."
    assert assistant.text == ""
    assert tool.role == "tool" and tool.tool_call_id == "call_1" and tool.text == "sunny"
    assert request.last_user_text == "What is in this picture?"


def test_minimal_request_defaults() -> None:
    request, options = parse_chat_request(minimal())
    assert (options.stream, options.include_usage) == (False, False)
    s = request.sampling
    assert s.temperature is None and s.max_tokens is None and s.stop == [] and s.n == 1
    assert s.logprobs is False and s.top_logprobs is None
    assert request.tools == [] and request.tool_choice == "auto" and request.parallel_tool_calls is True
    assert request.extra == {}
    assert request.options == RequestOptions()
    assert request.response_format is None


def test_max_tokens_alone_and_stop_string() -> None:
    request, _ = parse_chat_request(minimal(max_tokens=7, stop="\n\n"))
    assert request.sampling.max_tokens == 7
    assert request.sampling.stop == ["\n\n"]


def test_integer_valued_floats_are_integers() -> None:
    request, _ = parse_chat_request(minimal(max_tokens=8.0, seed=3.0))
    assert request.sampling.max_tokens == 8 and isinstance(request.sampling.max_tokens, int)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_weather"}}, "get_weather"),
    ],
)
def test_tool_choice_variants(choice: Any, expected: str) -> None:
    request, _ = parse_chat_request(minimal(tools=[WEATHER_TOOL], tool_choice=choice))
    assert request.tool_choice == expected


def test_image_url_as_a_plain_string_and_assistant_refusal_part() -> None:
    request, _ = parse_chat_request(
        minimal(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": "data:image/png;base64,AAAA"}],
                },
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                {"role": "assistant", "refusal": "Still no."},
                {"role": "user", "content": "ok"},
            ]
        )
    )
    assert request.messages[0].content == [ContentPart("image", image_url="data:image/png;base64,AAAA")]
    assert request.messages[1].text == "No."
    assert request.messages[2].text == "Still no."


def test_extension_params_land_in_extra_ttl_in_options_and_unknown_keys_are_ignored() -> None:
    request, _ = parse_chat_request(
        minimal(
            ttl=60, chat_template_kwargs={"enable_thinking": False}, metadata={"a": "b"}, store=True, foo=1
        )
    )
    assert request.extra == {"chat_template_kwargs": {"enable_thinking": False}}  # passed through
    assert request.options.ttl == 60  # read by the server itself


def test_null_optional_params_are_treated_as_absent() -> None:
    request, options = parse_chat_request(
        minimal(temperature=None, stream=None, stream_options=None, tools=None, tool_choice=None, stop=None)
    )
    assert request.sampling.temperature is None
    assert options.stream is False
    assert request.tool_choice == "auto"


def test_prediction_as_text_or_text_parts() -> None:
    """OpenAI's Predicted Outputs: the text most of the answer is expected to repeat."""
    request, _ = parse_chat_request(minimal(prediction={"type": "content", "content": "def f():\n"}))
    assert request.prediction == "def f():\n"
    parts = [{"type": "text", "text": "a = 1\n"}, {"type": "text", "text": "b = 2\n"}]
    request, _ = parse_chat_request(minimal(prediction={"type": "content", "content": parts}))
    assert request.prediction == "a = 1\nb = 2\n"
    assert parse_chat_request(minimal())[0].prediction is None
    assert parse_chat_request(minimal(prediction=None))[0].prediction is None


# --- invalid requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ([], None),  # not an object
        ("hello", None),
        (minimal(model=5), "model"),
        ({"model": "m"}, "messages"),
        (minimal(messages=[]), "messages"),
        (minimal(messages="hi"), "messages"),
        (minimal(messages=["hi"]), "messages[0]"),
        (minimal(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
        (minimal(messages=[{"content": "x"}]), "messages[0].role"),
        (minimal(messages=[{"role": "user"}]), "messages[0].content"),
        (minimal(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (
            minimal(
                messages=[{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "audio"}]}]
            ),
            "messages[1].content[0].type",
        ),
        (
            minimal(
                messages=[{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]
            ),
            "messages[0].content[0].type",
        ),
        (
            minimal(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content[0].image_url",
        ),
        (minimal(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages[0].content[0].text"),
        (minimal(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id"),
        (minimal(messages=[{"role": "assistant"}]), "messages[0].content"),
        (
            minimal(messages=[{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]),
            "messages[0].tool_calls[0].function",
        ),
        (
            minimal(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]),
            "messages[0].tool_calls[0].id",
        ),
        (minimal(messages=[{"role": "user", "content": "x", "name": 3}]), "messages[0].name"),
        (minimal(temperature=2.5), "temperature"),
        (minimal(temperature=-0.1), "temperature"),
        (minimal(temperature="hot"), "temperature"),
        (minimal(temperature=True), "temperature"),
        (minimal(top_p=1.5), "top_p"),
        (minimal(presence_penalty=3), "presence_penalty"),
        (minimal(frequency_penalty=-3), "frequency_penalty"),
        (minimal(seed=1.5), "seed"),
        (minimal(max_tokens=0), "max_tokens"),
        (minimal(max_completion_tokens="10"), "max_completion_tokens"),
        (minimal(n=0), "n"),
        (minimal(logprobs="yes"), "logprobs"),
        (minimal(top_logprobs=2), "top_logprobs"),  # without logprobs: true
        (minimal(logprobs=True, top_logprobs=21), "top_logprobs"),
        (minimal(stop=5), "stop"),
        (minimal(stop=["a", "b", "c", "d", "e"]), "stop"),
        (minimal(stop=["a", 1]), "stop"),
        (minimal(stream="true"), "stream"),
        (minimal(stream_options={"include_usage": True}), "stream_options"),  # without stream
        (minimal(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
        (minimal(stream=True, stream_options=[]), "stream_options"),
        (minimal(logit_bias={"": -100}), "logit_bias"),  # neither a token id nor a text
        (minimal(logit_bias={"5": "ban"}), "logit_bias"),
        (minimal(logit_bias={"50256": -101}), "logit_bias"),
        (minimal(modalities=["text", "audio"]), "modalities"),
        (minimal(audio={"voice": "alloy"}), "audio"),
        (minimal(functions=[{"name": "f"}]), "functions"),
        (minimal(tools={"type": "function"}), "tools"),
        (minimal(tools=[{"type": "retrieval"}]), "tools[0].type"),
        (minimal(tools=[{"type": "function"}]), "tools[0].function"),
        (minimal(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
        (minimal(tool_choice="any"), "tool_choice"),
        (minimal(tool_choice="required"), "tool_choice"),  # without tools
        (minimal(tool_choice=3), "tool_choice"),
        (minimal(tools=[WEATHER_TOOL], tool_choice={"type": "function"}), "tool_choice.function"),
        (
            minimal(tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice.function.name",
        ),
        (minimal(parallel_tool_calls="no"), "parallel_tool_calls"),
        (minimal(response_format={"type": "xml"}), "response_format.type"),
        (minimal(reasoning_effort=1), "reasoning_effort"),
        (minimal(ttl="1h"), "ttl"),
        (minimal(ttl=0), "ttl"),
        (minimal(ttl=-60), "ttl"),
        (minimal(prediction="text"), "prediction"),
        (minimal(prediction={"content": "x"}), "prediction.type"),
        (minimal(prediction={"type": "file", "content": "x"}), "prediction.type"),
        (minimal(prediction={"type": "content"}), "prediction.content"),
        (minimal(prediction={"type": "content", "content": 5}), "prediction.content"),
        (
            minimal(prediction={"type": "content", "content": [{"type": "image_url"}]}),
            "prediction.content[0].type",
        ),
        (
            minimal(prediction={"type": "content", "content": [{"type": "text"}]}),
            "prediction.content[0].text",
        ),
    ],
)
def test_invalid_requests_name_the_parameter(payload: Any, param: str | None) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_chat_request(payload)
    info = caught.value.info
    assert info.kind is ErrorKind.INVALID_REQUEST
    assert info.status == 400
    assert info.param == param
    assert info.message


def test_error_messages_follow_openai_wording() -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_chat_request(minimal(temperature=3))
    assert caught.value.info.message == "Invalid 'temperature': expected a value <= 2, but got 3 instead."
    with pytest.raises(SluicegateError) as caught:  # a missing model: no default model served it
        ModelNames().resolve(
            parse_chat_request({"messages": [{"role": "user", "content": "x"}]})[0].model, {}
        )
    assert caught.value.info.message == "Missing required parameter: 'model'."
    assert caught.value.info.code == "missing_required_parameter"  # as OpenAI sends it
    with pytest.raises(SluicegateError) as caught:
        parse_chat_request(minimal(messages=[{"role": "robot", "content": "x"}]))
    assert "'robot'" in caught.value.info.message and "'user'" in caught.value.info.message
    with pytest.raises(SluicegateError) as caught:
        parse_chat_request(minimal(temperature="hot"))
    assert caught.value.info.message == (
        "Invalid type for 'temperature': expected a number, but got a string instead."
    )


def test_logit_bias_text_keys_are_kept_for_the_engine_to_tokenize() -> None:
    """llama-server's `{"text": bias}` in Chat Completions too: the engine tokenizes the text
    (an engine without a tokenizer refuses it: tests/unit/engines/test_scripted.py)."""
    chat, _ = parse_chat_request(minimal(logit_bias={"50256": -100, " the": False}))
    assert chat.sampling.logit_bias == {50256: -100.0}
    assert chat.sampling.logit_bias_text == {" the": float("-inf")}
