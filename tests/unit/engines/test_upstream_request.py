"""request_body.py and the `openai` engine's config: what the upstream receives, what the
config accepts."""

from __future__ import annotations

import pytest

from sluicegate.core.errors import ErrorKind
from sluicegate.core.request import (
    ChatRequest,
    ContentPart,
    Message,
    RequestOptions,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from sluicegate.engines.base import ConfigError
from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine
from sluicegate.engines.upstream.errors import http_error
from sluicegate.engines.upstream.request_body import request_body
from sluicegate.engines.upstream.wire import usage_from


def test_messages_with_images_tool_calls_and_results() -> None:
    request = ChatRequest(
        model="ours",
        messages=[
            Message("developer", "be brief"),
            Message(
                "user",
                [ContentPart("text", "what is"), ContentPart("image", image_url="data:image/png;base64,AA")],
            ),
            Message("assistant", "", tool_calls=[ToolCall("call_1", "look", '{"x":1}')]),
            Message("tool", "seen", tool_call_id="call_1"),
        ],
    )
    body = request_body(request, "org/upstream-model")
    assert body["model"] == "org/upstream-model"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"x":1}'}}
            ],
        },
        {"role": "tool", "content": "seen", "tool_call_id": "call_1"},
    ]
    assert "tools" not in body and "temperature" not in body


def test_tools_choice_sampling_and_extras() -> None:
    request = ChatRequest(
        model="ours",
        messages=[Message("user", "hi")],
        tools=[
            ToolSpec("get", "Get it", {"type": "object", "properties": {}}, strict=True),
            ToolSpec("bare"),
        ],
        tool_choice="get",
        parallel_tool_calls=False,
        sampling=SamplingParams(
            temperature=0.2,
            top_k=40,
            repeat_penalty=1.1,
            stop=["END"],
            max_tokens=64,
            logprobs=True,
            top_logprobs=2,
            seed=7,
        ),
        reasoning_effort="low",
        response_format={"type": "json_object"},
        options=RequestOptions(ttl=60, context_length=4096),
        extra={"chat_template_kwargs": {"enable_thinking": False}, "model": "no"},
    )
    body = request_body(request, "up")
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get",
                "description": "Get it",
                "parameters": {"type": "object", "properties": {}},
                "strict": True,
            },
        },
        {
            "type": "function",
            "function": {"name": "bare", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get"}}
    assert body["parallel_tool_calls"] is False
    for key, value in {
        "temperature": 0.2,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "stop": ["END"],
        "max_tokens": 64,
        "logprobs": True,
        "top_logprobs": 2,
        "seed": 7,
        "reasoning_effort": "low",
        "response_format": {"type": "json_object"},
        "chat_template_kwargs": {"enable_thinking": False},
    }.items():
        assert body[key] == value, key
    assert "ttl" not in body and "context_length" not in body  # Sluicegate's own knobs
    assert body["model"] == "up"  # an extra never overrides what the engine sets


def test_prediction_goes_upstream_and_its_counts_come_back() -> None:
    request = ChatRequest(model="ours", messages=[Message("user", "edit it")], prediction="x = 1\n")
    assert request_body(request, "up")["prediction"] == {"type": "content", "content": "x = 1\n"}
    assert "prediction" not in request_body(ChatRequest(model="ours", messages=[Message("user", "hi")]), "up")
    usage = usage_from(
        {
            "prompt_tokens": 5,
            "completion_tokens": 9,
            "completion_tokens_details": {"accepted_prediction_tokens": 7, "rejected_prediction_tokens": 2},
        }
    )
    assert (usage.accepted_prediction_tokens, usage.rejected_prediction_tokens) == (7, 2)


def config(**table: object) -> dict[str, object]:
    return {"id": "m", "engine": "openai", "base_url": "http://127.0.0.1:9/v1", **table}


def test_config_defaults_and_api_key_from_the_environment() -> None:
    parsed = parse_config(config(api_key_env="UP_KEY", headers={"X-Team": "a"}), env={"UP_KEY": "sk-1"})
    assert parsed.upstream_model == "m"
    assert parsed.headers == {"Authorization": "Bearer sk-1", "X-Team": "a"}
    assert (parsed.connect_timeout, parsed.first_byte_timeout, parsed.idle_timeout, parsed.total_timeout) == (
        10.0,
        120.0,
        60.0,
        None,
    )
    assert parsed.think_tags and parsed.health_path == "/models"
    assert parsed.capabilities.reasoning_options == []


def test_a_reasoning_upstream_offers_lmstudio_reasoning_efforts() -> None:
    caps = parse_config(config(reasoning=True), env={}).capabilities
    assert caps.reasoning and caps.reasoning_options == ["low", "medium", "high"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (config(bogus=1), "unknown keys ['bogus']"),
        ({"id": "m", "engine": "openai"}, "exactly one of `base_url` or `base_urls`"),
        (config(base_urls=["http://a/v1"]), "exactly one"),
        ({"id": "m", "engine": "openai", "base_urls": []}, "non-empty list"),
        (config(base_url="localhost:8000"), "http(s) URL"),
        (config(api_key_env="NOT_SET_ANYWHERE"), "$NOT_SET_ANYWHERE, which is not set"),
        (config(api_key="a", api_key_env="B"), "not both"),
        (config(idle_timeout=-1), "idle_timeout must be a non-negative number"),
        (config(think_tags="yes"), "think_tags must be true or false"),
        (config(headers={"X": 1}), "headers must be a table of strings"),
        (config(health_path="models"), "health_path must be a path"),
        (config(prefix="p/"), "prefix only applies with discover"),
        (config(context_length=0), "context_length must be a positive integer"),
        ({"engine": "openai", "base_url": "http://a/v1"}, "needs a string `id`"),
    ],
)
def test_config_errors_name_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        parse_config(table, env={})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("status", "body", "kind", "status_out", "text"),
    [
        (
            400,
            b'{"error":{"message":"max_tokens is too large","type":"BadRequestError","param":"max_tokens","code":400}}',
            ErrorKind.INVALID_REQUEST,
            400,
            "max_tokens is too large",
        ),
        (
            401,
            b'{"error":{"message":"Invalid API key"}}',
            ErrorKind.UPSTREAM,
            502,
            "refused Sluicegate's credentials",
        ),
        (
            404,
            b'{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","code":404}',
            ErrorKind.NOT_FOUND,
            404,
            "does not exist",
        ),
        (429, b"Too Many Requests", ErrorKind.RATE_LIMITED, 429, "Too Many Requests"),
        (500, b"<html>Internal Server Error</html>", ErrorKind.UPSTREAM, 502, "Internal Server Error"),
        (503, b"", ErrorKind.UPSTREAM, 502, "(empty body)"),
    ],
)
def test_upstream_http_errors(status: int, body: bytes, kind: ErrorKind, status_out: int, text: str) -> None:
    info = http_error(status, body, "http://up/v1", "m")
    assert info.kind is kind and info.status == status_out
    assert text in info.message


def test_the_offered_capabilities_follow_the_config() -> None:
    """`info()` runs on every request, so the capabilities it offers (the config's, with text
    completion relayed) are derived once; a config with other capabilities is seen at once, and
    the config's own are left as they are."""
    engine = OpenAIUpstreamEngine(parse_config(config(), env={}))
    first = engine.info().capabilities
    assert first.completion and first.fill_in_middle and not first.vision
    assert engine.info().capabilities is first  # derived once
    assert not engine.config.capabilities.completion  # the config's own: untouched
    engine.config = parse_config(config(vision=True, reasoning=True), env={})
    now = engine.info().capabilities
    assert now.vision and now.reasoning and now.completion and now.fill_in_middle
