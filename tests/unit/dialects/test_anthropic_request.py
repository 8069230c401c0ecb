"""The Anthropic Messages parser: every field Claude Code sends is accepted, bad input is a
400 naming the parameter, and the conversions (system, tool results, thinking) are exact."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.dialects.anthropic.request import clamp_max_tokens, parse_messages_request
from sluicegate.dialects.anthropic.signature import ThinkingSigner

SIGNER = ThinkingSigner(b"k" * 32)


def parse(body: dict[str, Any], **kwargs: Any) -> Any:
    return parse_messages_request(body, SIGNER, **kwargs)


def base(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **extra}


def refused(body: Any) -> SluicegateError:
    with pytest.raises(SluicegateError) as caught:
        parse(body)
    assert caught.value.info.kind is ErrorKind.INVALID_REQUEST
    return caught.value


def claude_code_body() -> dict[str, Any]:
    """What Claude Code 2.1 sends on a turn (shape as captured, text shortened)."""
    cache = {"type": "ephemeral"}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1.197; cch=abc123;",
                "cache_control": cache,
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": cache},
            {"type": "text", "text": "Be concise.", "cache_control": cache},
        ],
        "messages": [
            {"role": "system", "content": "Extra context for this session."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "list files", "cache_control": cache}],
            },
        ],
        "metadata": {"user_id": "user_abc_account__session_123"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "tools": [
            {
                "name": "Bash",
                "description": "Run a command",
                "input_schema": {
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                    "additionalProperties": False,
                },
            },
            {
                "name": "WebFetch",
                "description": "Fetch",
                "defer_loading": True,
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": cache,
            },
        ],
    }


def test_claude_code_turn_is_accepted_and_mapped() -> None:
    chat, options = parse(
        claude_code_body(), betas="claude-code-20250219, interleaved-thinking-2025-05-14,future-x"
    )
    assert options.stream and options.omit_thinking
    assert options.betas == ("claude-code-20250219", "interleaved-thinking-2025-05-14", "future-x")
    system = chat.messages[0]
    assert system.role == "system"
    # the billing header is gone; the role-system message joins the system prompt
    assert system.content == "You are Claude Code.\n\nBe concise.\n\nExtra context for this session."
    assert [m.role for m in chat.messages] == ["system", "user"]
    assert chat.messages[1].content == "list files"
    assert chat.reasoning_effort == "high"
    assert [t.name for t in chat.tools] == ["Bash", "WebFetch"]
    assert "$schema" not in chat.tools[0].parameters
    assert chat.tools[0].parameters["additionalProperties"] is False
    assert chat.sampling.max_tokens == 32000


def test_billing_header_does_not_change_the_prompt() -> None:
    one, two = claude_code_body(), claude_code_body()
    two["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.197; cch=zzz999;"
    assert parse(one)[0].messages == parse(two)[0].messages


def test_max_tokens_is_required_but_clamped() -> None:
    error = refused({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert error.info.param == "max_tokens"
    chat, _ = parse(base(max_tokens=128000))
    clamp_max_tokens(chat, 8192)
    assert chat.sampling.max_tokens == 8192
    chat, _ = parse({"model": "m", "messages": [{"role": "user", "content": "x"}]}, counting=True)
    assert chat.sampling.max_tokens is None


def test_tool_use_and_results_round_trip() -> None:
    body = base(
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {"type": "text", "text": "and tomorrow?"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": True}
                ],
            },
        ],
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    chat, _ = parse(body)
    roles = [m.role for m in chat.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assistant = chat.messages[1]
    assert assistant.content == "Checking."
    assert assistant.tool_calls[0].id == "toolu_1"
    assert assistant.tool_calls[0].arguments == '{"city":"Paris"}'
    assert chat.messages[2].tool_call_id == "toolu_1" and chat.messages[2].content == "sunny"
    assert chat.messages[3].content == "and tomorrow?"
    assert chat.messages[5].content == "Error: boom"
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "tool", "name": "t"}, "t")],
)
def test_tool_choice(choice: dict[str, Any], expected: str) -> None:
    chat, _ = parse(base(tools=[{"name": "t", "input_schema": {"type": "object"}}], tool_choice=choice))
    assert chat.tool_choice == expected


def test_thinking_signed_by_us_is_replayed_and_foreign_dropped() -> None:
    def turn(block: dict[str, Any]) -> Any:
        messages = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [block, {"type": "text", "text": "a"}]},
            {"role": "user", "content": "more"},
        ]
        return parse(base(messages=messages))[0].messages[1]

    ours = {"type": "thinking", "thinking": "deep thought", "signature": SIGNER.sign("deep thought")}
    assert turn(ours).reasoning == "deep thought"
    tampered = {**ours, "thinking": "other thought"}
    assert turn(tampered).reasoning is None
    foreign = {"type": "thinking", "thinking": "x", "signature": "EqQBCkYIBxgCKkB..."}
    assert turn(foreign).reasoning is None
    omitted = {"type": "thinking", "thinking": "", "signature": SIGNER.sign("hidden", embed=True)}
    assert turn(omitted).reasoning == "hidden"
    assert turn({"type": "redacted_thinking", "data": "abc"}).content == "a"


@pytest.mark.parametrize("block", [{"signature": ""}, {}])
def test_unsigned_thinking_is_replayed(block: dict[str, Any]) -> None:
    """llama-server's replies carry `signature: ""`; a client moving from it (or building the
    history itself) sends them back: its text is the assistant's reasoning, as there."""
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "check first", **block}]},
        {"role": "user", "content": "more"},
    ]
    assert parse(base(messages=messages))[0].messages[1].reasoning == "check first"


@pytest.mark.parametrize(
    ("thinking", "effort", "omit"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, "low", False),
        ({"type": "enabled", "budget_tokens": 10000}, "medium", False),
        ({"type": "enabled", "budget_tokens": 20000}, "high", False),
        ({"type": "disabled"}, "none", False),
        ({"type": "adaptive"}, "medium", False),
        ({"type": "adaptive", "display": "omitted"}, "medium", True),
    ],
)
def test_thinking_maps_to_reasoning(thinking: dict[str, Any], effort: str, omit: bool) -> None:
    chat, options = parse(base(thinking=thinking))
    assert (chat.reasoning_effort, options.omit_thinking) == (effort, omit)


def test_output_format_is_structured_output() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    chat, _ = parse(base(output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert chat.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


def test_images_documents_and_sampling() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "doc body"},
            "title": "T",
        },
        {"type": "text", "text": "describe"},
    ]
    chat, _ = parse(
        base(
            messages=[{"role": "user", "content": content}],
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            stop_sequences=["END"],
        )
    )
    parts = chat.messages[0].content
    assert [p.type for p in parts] == ["image", "image", "text", "text"]
    assert parts[0].image_url == "data:image/png;base64,iVBOR"
    assert parts[2].text == "T\n\ndoc body"
    s = chat.sampling
    assert (s.temperature, s.top_p, s.top_k, s.stop) == (0.5, 0.9, 40, ["END"])


def test_server_tools_are_skipped_not_refused() -> None:
    chat, options = parse(base(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]))
    assert chat.tools == [] and options.skipped_tools == ["web_search"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "max_tokens": 1}, "messages"),
        ({"model": 5, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}, "model"),
        (base(max_tokens=0), "max_tokens"),
        (base(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
        (base(messages=[{"role": "user", "content": [{"type": "bogus"}]}]), "messages[0].content[0].type"),
        (base(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (base(thinking={"type": "sometimes"}), "thinking.type"),
        (base(temperature=3), "temperature"),
        (base(tools=[{"name": "t"}]), "tools[0].input_schema"),
        (base(tool_choice={"type": "tool", "name": "missing"}), "tool_choice.name"),
        (base(stop_sequences=[1]), "stop_sequences"),
    ],
)
def test_bad_input_names_the_parameter(body: Any, param: str) -> None:
    assert refused(body).info.param == param


def test_body_must_be_an_object() -> None:
    refused([1, 2])


def test_a_tool_results_image_is_an_image_part() -> None:
    """An image in a `tool_result` reaches the model as an image, where it stands (it was the
    text `[image]` before); an error result keeps its `Error:` prefix."""
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/shot.png"}}
    body = base(
        messages=[
            {"role": "user", "content": "screenshot?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "blurry"}, image],
                    }
                ],
            },
        ]
    )
    chat, _ = parse(body)
    tool = chat.messages[2]
    assert tool.role == "tool" and tool.tool_call_id == "t1" and not isinstance(tool.content, str)
    assert [(p.type, p.text, p.image_url) for p in tool.content] == [
        ("text", "Error: blurry", ""),
        ("image", "", "https://example.com/shot.png"),
    ]
    alone = base(
        messages=[
            *body["messages"][:2],
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}]},
        ]
    )
    assert [p.type for p in parse(alone)[0].messages[2].content] == ["image"]
