"""parse_lmstudio_chat: the `/api/v1/chat` body, as strictly as LM Studio validates it."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.request import ContentPart
from sluicegate.core.tool_selection import PluginChoice, RequestServer, ToolSelection
from sluicegate.dialects.lmstudio.request import CHAT_KEYS, parse_lmstudio_chat, tool_selection

PNG = "data:image/png;base64,iVBORw0KGgo="
MISSING = "missing_required_parameter"  # the code a missing required parameter carries, as on OpenAI


def parse(**fields: Any) -> Any:
    return parse_lmstudio_chat({"model": "m", "input": "Hi.", **fields})


def rejected(body: Any) -> SluicegateError:
    with pytest.raises(SluicegateError) as caught:
        parse_lmstudio_chat(body)
    assert caught.value.info.kind is ErrorKind.INVALID_REQUEST
    assert caught.value.info.status == 400
    return caught.value


def test_the_documented_keys_are_the_accepted_keys() -> None:
    assert {
        "model",
        "input",
        "system_prompt",
        "integrations",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repeat_penalty",
        "max_output_tokens",
        "reasoning",
        "context_length",
        "store",
        "previous_response_id",
    } | {"context_overflow"} == CHAT_KEYS  # LM Studio's keys, and Sluicegate's own extension


def test_defaults() -> None:
    req = parse()

    assert req.model == "m"
    assert req.input_parts == [ContentPart("text", text="Hi.")]
    assert req.stream is False
    assert req.store is True
    assert req.system_prompt is None
    assert req.reasoning is None
    assert req.previous_response_id is None
    assert req.integrations == []
    assert req.context_length is None
    assert req.sampling.max_tokens is None and req.sampling.temperature is None


def test_every_field_is_read() -> None:
    req = parse(
        input=[{"type": "text", "content": "Look:"}, {"type": "image", "data_url": PNG}],
        system_prompt="Be brief.",
        stream=True,
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        repeat_penalty=1.1,
        max_output_tokens=64,
        reasoning="off",
        context_length=8192,
        store=False,
        previous_response_id="resp_abc",
    )

    assert req.input_parts == [
        ContentPart("text", text="Look:"),
        ContentPart("image", image_url=PNG),
    ]
    assert req.system_prompt == "Be brief."
    assert req.stream is True and req.store is False
    s = req.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty) == (0.2, 0.9, 40, 0.05, 1.1)
    assert s.max_tokens == 64
    assert req.reasoning == "off"
    assert req.context_length == 8192
    assert req.previous_response_id == "resp_abc"


def test_integration_shapes() -> None:
    mcp = {
        "type": "ephemeral_mcp",
        "server_label": "huggingface",
        "server_url": "https://huggingface.co/mcp",
        "allowed_tools": ["model_search"],
        "headers": {"Authorization": "Bearer x"},
    }
    plugin = {"type": "plugin", "id": "mcp/playwright", "allowed_tools": ["browser_navigate"]}
    req = parse(integrations=["mcp/playwright", plugin, mcp])

    assert req.integrations == [{"type": "plugin", "id": "mcp/playwright"}, plugin, mcp]
    assert tool_selection(req.integrations) == ToolSelection(
        plugins=[PluginChoice("mcp/playwright"), PluginChoice("mcp/playwright", ["browser_navigate"])],
        servers=[
            RequestServer(
                "huggingface", "https://huggingface.co/mcp", {"Authorization": "Bearer x"}, ["model_search"]
            )
        ],
    )


@pytest.mark.parametrize(
    ("body", "param", "named"),
    [
        ({"model": "m", "input": "x", "tools": []}, "tools", ["'tools'"]),
        ({"model": "m", "input": "x", "stop": ["a"], "max_tokens": 3}, "stop", ["'stop'", "'max_tokens'"]),
        ({"model": "m", "input": [{"type": "text", "content": "x", "role": "user"}]}, "input[0]", ["'role'"]),
        (
            {"model": "m", "input": [{"type": "image", "data_url": PNG, "detail": "low"}]},
            "input[0]",
            ["'detail'"],
        ),
        (
            {"model": "m", "input": "x", "integrations": [{"type": "plugin", "id": "p", "timeout": 5}]},
            "integrations.0",
            ["'timeout'"],
        ),
        (
            {
                "model": "m",
                "input": "x",
                "integrations": [
                    "p",
                    {"type": "ephemeral_mcp", "server_label": "a", "server_url": "u", "tools": []},
                ],
            },
            "integrations.1",
            ["'tools'"],
        ),
    ],
)
def test_unknown_keys_are_named(body: dict[str, Any], param: str, named: list[str]) -> None:
    info = rejected(body).info
    assert info.code == "unrecognized_keys"
    assert info.param == param
    assert info.message.startswith("Unrecognized key(s) in object: ")
    for name in named:
        assert name in info.message


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m", "input": [{"type": "message", "content": "x"}]}, "input[0]", "invalid_union"),
        ({"model": "m", "input": [{"type": "input_text", "text": "x"}]}, "input[0]", "invalid_union"),
        (
            {"model": "m", "input": [{"type": "image", "data_url": "https://x/cat.png"}]},
            "input[0].data_url",
            None,
        ),
        (
            {"model": "m", "input": [{"type": "image", "data_url": "data:text/plain;base64,aGk="}]},
            "input[0].data_url",
            None,
        ),
        ({"model": "m", "input": [{"type": "image"}]}, "input[0].data_url", MISSING),
        ({"model": "m", "input": [{"type": "text", "content": 5}]}, "input[0].content", None),
        ({"model": "m", "input": ["x"]}, "input[0]", None),
        ({"model": "m", "input": []}, "input", None),
        ({"model": "m", "input": {"type": "text"}}, "input", None),
        ({"model": "m"}, "input", MISSING),
        ({"input": "x"}, "model", MISSING),
        ({"model": "m", "input": "x", "stream": 1}, "stream", None),
        ({"model": "m", "input": "x", "store": "false"}, "store", None),
        ({"model": "m", "input": "x", "temperature": 1.01}, "temperature", None),
        ({"model": "m", "input": "x", "top_p": -0.5}, "top_p", None),
        ({"model": "m", "input": "x", "top_k": 2.5}, "top_k", None),
        ({"model": "m", "input": "x", "min_p": 2}, "min_p", None),
        ({"model": "m", "input": "x", "repeat_penalty": "1"}, "repeat_penalty", None),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens", None),
        ({"model": "m", "input": "x", "context_length": 0}, "context_length", None),
        ({"model": "m", "input": "x", "reasoning": "xhigh"}, "reasoning", None),
        ({"model": "m", "input": "x", "system_prompt": 3}, "system_prompt", None),
        ({"model": "m", "input": "x", "previous_response_id": "chat_1"}, "previous_response_id", None),
        ({"model": "m", "input": "x", "integrations": {"type": "plugin"}}, "integrations", None),
        ({"model": "m", "input": "x", "integrations": [""]}, "integrations.0", None),
        ({"model": "m", "input": "x", "integrations": [3]}, "integrations.0", None),
        ({"model": "m", "input": "x", "integrations": [{"id": "p"}]}, "integrations.0.type", MISSING),
        ({"model": "m", "input": "x", "integrations": [{"type": "remote_mcp"}]}, "integrations.0.type", None),
        ({"model": "m", "input": "x", "integrations": [{"type": "plugin"}]}, "integrations.0.id", MISSING),
        (
            {"model": "m", "input": "x", "integrations": [{"type": "ephemeral_mcp", "server_url": "u"}]},
            "integrations.0.server_label",
            MISSING,
        ),
        (
            {"model": "m", "input": "x", "integrations": [{"type": "ephemeral_mcp", "server_label": "a"}]},
            "integrations.0.server_url",
            MISSING,
        ),
        (
            {
                "model": "m",
                "input": "x",
                "integrations": [
                    {"type": "ephemeral_mcp", "server_label": "a", "server_url": "u", "headers": {"X": 1}}
                ],
            },
            "integrations.0.headers",
            None,
        ),
        (
            {
                "model": "m",
                "input": "x",
                "integrations": [{"type": "plugin", "id": "p", "allowed_tools": "all"}],
            },
            "integrations.0.allowed_tools",
            None,
        ),
        (
            {
                "model": "m",
                "input": "x",
                "integrations": [{"type": "plugin", "id": "p", "allowed_tools": [1]}],
            },
            "integrations.0.allowed_tools",
            None,
        ),
    ],
)
def test_bad_values_name_their_parameter(body: dict[str, Any], param: str | None, code: str | None) -> None:
    info = rejected(body).info
    if param is not None:
        assert info.param == param, info
    assert info.code == code, info
    assert info.message


def test_the_wrong_input_item_type_says_what_is_expected() -> None:
    info = rejected({"model": "m", "input": [{"type": "message", "content": "x"}]}).info
    assert info.message == "Invalid discriminator value. Expected 'text' | 'image'"


@pytest.mark.parametrize("body", [None, [], "hi", 3])
def test_the_body_must_be_an_object(body: Any) -> None:
    rejected(body)
