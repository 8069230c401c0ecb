"""LM Studio `/api/v1/chat` with `integrations`: real MCP servers (stdio and streamable HTTP) and
the files plugin run server-side, every round streams, and failures are reported, not fatal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_support import Server
from lmstudio_support import (
    assert_lmstudio_error,
    chat_body,
    client_for,
    comparable,
    post_chat,
    stream_chat,
)
from tools_support import MAX_ROUNDS, MODEL, WEB_TIMEOUT_SECONDS, tools_server

from mcp_fixtures import FAIL_PREFIX, HttpMcpServer, mcp_http_server

pytestmark = pytest.mark.e2e
__all__ = ["mcp_http_server", "tools_server"]  # fixtures, imported for pytest

CALC = {"type": "plugin", "plugin_id": "mcp/calc"}
WEB = {"type": "plugin", "plugin_id": "mcp/web"}
PROMPT = ["prompt_processing.start", *["prompt_processing.progress"] * 4, "prompt_processing.end"]


@pytest.fixture
def lms(tools_server: Server) -> Iterator[httpx.Client]:
    with client_for(tools_server) as client:
        yield client


def body(text: str, integrations: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": text, "integrations": integrations, **extra}


def blocks(names: list[str]) -> list[str]:
    """The event names without deltas and progress, e.g. [..., 'tool_call.start', ...]."""
    return [n for n in names if not n.endswith((".delta", ".progress"))]


def test_a_call_streams_each_round_as_it_happens(lms: httpx.Client) -> None:
    stream = stream_chat(lms, body("What is the weather in Paris?", ["mcp/calc"]))
    assert stream.names == [
        "chat.start",
        *PROMPT,
        "reasoning.start",
        *["reasoning.delta"] * 5,
        "reasoning.end",
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.success",
        *PROMPT,
        "message.start",
        *["message.delta"] * 8,
        "message.end",
        "chat.end",
    ]
    assert stream.of("tool_call.start") == [
        {"type": "tool_call.start", "tool": "get_weather", "provider_info": CALC}
    ]
    assert stream.of("tool_call.arguments") == [
        {
            "type": "tool_call.arguments",
            "tool": "get_weather",
            "arguments": {"city": "Paris"},
            "provider_info": CALC,
        }
    ]
    (success,) = stream.of("tool_call.success")
    assert list(success) == ["type", "tool", "arguments", "output", "provider_info"]
    assert "Paris: 18°C, light rain (celsius)" in success["output"]
    assert stream.text("message") == "It is 18°C with light rain in Paris.", "the model read the result"
    assert stream.result["output"] == [
        {"type": "reasoning", "content": "I should look it up."},
        {
            "type": "tool_call",
            "tool": "get_weather",
            "arguments": {"city": "Paris"},
            "output": success["output"],
            "provider_info": CALC,
        },
        {"type": "message", "content": "It is 18°C with light rain in Paris."},
    ]
    stats = stream.result["stats"]
    assert stats["total_output_tokens"] == 5 + 2 + 8, "usage is summed over both rounds"
    assert stats["reasoning_output_tokens"] == 5


def test_non_streaming_body_equals_the_streams_chat_end(lms: httpx.Client) -> None:
    request = body("What is the weather in Paris?", ["mcp/calc"])
    stream = stream_chat(lms, request)
    result = chat_body(lms, request)
    assert comparable(result) == comparable(stream.result)
    assert [item["type"] for item in result["output"]] == ["reasoning", "tool_call", "message"]


def test_v0_vocabulary_reports_tool_call_result(lms: httpx.Client) -> None:
    stream = stream_chat(
        lms, body("What is the weather in Paris?", ["mcp/calc"]), params={"events": "v0"}, vocabulary="v0"
    )
    (result,) = stream.of("tool_call.result")
    assert result["tool"] == "get_weather" and result["provider_info"] == CALC
    assert "light rain" in result["output"]
    assert "tool_call.success" not in stream.names


def test_parallel_calls_on_two_servers(lms: httpx.Client) -> None:
    stream = stream_chat(
        lms, body("Add these in parallel", ["mcp/calc", {"type": "plugin", "id": "mcp/web"}])
    )
    assert [n for n in blocks(stream.names) if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.success",
        "tool_call.success",
    ]
    assert [(s["tool"], s["provider_info"], s["output"]) for s in stream.of("tool_call.success")] == [
        ("add", CALC, "3"),
        ("web_add", WEB, "7"),
    ]
    assert stream.text("message") == "Done."


def test_a_tool_error_is_a_failure_and_the_model_recovers(lms: httpx.Client) -> None:
    stream = stream_chat(lms, body("Please fail", ["mcp/calc"]))
    assert [n for n in blocks(stream.names) if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.failure",
    ]
    (failure,) = stream.of("tool_call.failure")
    assert FAIL_PREFIX + "boom" in failure["reason"]
    assert failure["metadata"] == {
        "type": "invalid_arguments",
        "tool_name": "fail",
        "arguments": {"message": "boom"},
        "provider_info": CALC,
    }
    assert stream.text("message") == "The tool failed, so I answer without it."
    assert stream.error is None
    assert stream.result["output"][0] == {
        "type": "invalid_tool_call",
        "reason": failure["reason"],
        "metadata": failure["metadata"],
    }


def test_a_tool_timeout_is_a_failure_and_the_stream_goes_on(lms: httpx.Client) -> None:
    stream = stream_chat(lms, body("Something slow", ["mcp/web"]))
    (failure,) = stream.of("tool_call.failure")
    assert f"did not answer within {WEB_TIMEOUT_SECONDS}" in failure["reason"]
    assert stream.text("message") == "The tool timed out."


def test_unknown_tool_and_bad_arguments_are_invalid_tool_calls(lms: httpx.Client) -> None:
    unknown = chat_body(lms, body("Use an unknown tool", ["mcp/calc"]))
    assert unknown["output"] == [
        {
            "type": "invalid_tool_call",
            "reason": "Cannot find tool with name teleport.",
            "metadata": {"type": "invalid_name", "tool_name": "teleport"},
        },
        {"type": "message", "content": "That tool does not exist."},
    ]
    bad_json = stream_chat(lms, body("Send bad json", ["mcp/calc"]))
    assert [n for n in blocks(bad_json.names) if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.failure",
    ]
    assert bad_json.of("tool_call.failure")[0]["metadata"]["type"] == "invalid_arguments"
    assert bad_json.text("message") == "My arguments were wrong."
    schema = chat_body(lms, body("Break the schema", ["mcp/calc"]))
    assert schema["output"][0]["type"] == "invalid_tool_call"
    assert schema["output"][0]["metadata"]["arguments"] == {"a": "one"}
    assert schema["output"][1] == {"type": "message", "content": "My arguments were wrong."}


def test_allowed_tools_limits_what_the_model_may_call(lms: httpx.Client) -> None:
    result = chat_body(
        lms,
        body(
            "What is the weather in Paris?", [{"type": "plugin", "id": "mcp/calc", "allowed_tools": ["add"]}]
        ),
    )
    assert result["output"][1]["metadata"] == {"type": "invalid_name", "tool_name": "get_weather"}
    assert result["output"][2] == {"type": "message", "content": "That tool does not exist."}


def test_the_files_plugin_through_integrations(lms: httpx.Client) -> None:
    stream = stream_chat(lms, body("Read my files", ["files"]))
    (success,) = stream.of("tool_call.success")
    assert success["provider_info"] == {"type": "plugin", "plugin_id": "files"}
    assert success["arguments"] == {"path": "notes.txt"}
    assert "mcp_servers" in success["output"]
    assert stream.text("message") == "The notes mention the MCP servers."


def test_an_ephemeral_server_from_the_request(lms: httpx.Client, mcp_http_server: HttpMcpServer) -> None:
    integration = {
        "type": "ephemeral_mcp",
        "server_label": "adder",
        "server_url": mcp_http_server.url,
        "allowed_tools": ["web_add"],
    }
    stream = stream_chat(lms, body("Use the ephemeral server", [integration]))
    (success,) = stream.of("tool_call.success")
    assert success["provider_info"] == {"type": "ephemeral_mcp", "server_label": "adder"}
    assert success["output"] == "11"


def test_an_ephemeral_server_on_a_private_address_is_refused(lms: httpx.Client) -> None:
    integration = {
        "type": "ephemeral_mcp",
        "server_label": "meta",
        "server_url": "http://169.254.169.254/mcp",
    }
    response = post_chat(lms, body("Use the ephemeral server", [integration], stream=True))
    assert_lmstudio_error(response, 400, code="server_url_refused", param="integrations", mentions=("meta",))


def test_an_unknown_plugin_is_refused(lms: httpx.Client) -> None:
    response = post_chat(lms, body("hi", ["mcp/nope"]))
    assert_lmstudio_error(
        response, 400, code="plugin_not_found", param="integrations", mentions=("mcp/nope",)
    )


def test_the_round_limit_ends_the_response_saying_why(lms: httpx.Client) -> None:
    stream = stream_chat(lms, body("Please loop forever", ["mcp/calc"]))
    assert len(stream.of("tool_call.success")) == MAX_ROUNDS
    assert stream.error is not None and stream.error["code"] == "max_tool_rounds"
    assert f"{MAX_ROUNDS} tool rounds" in stream.error["message"]
    assert stream.names[-2:] == ["error", "chat.end"]
    assert [item["type"] for item in stream.result["output"]] == ["tool_call"] * MAX_ROUNDS


def test_a_server_killed_mid_call_is_a_failure_and_later_requests_reconnect(
    lms: httpx.Client, mcp_http_server: HttpMcpServer
) -> None:
    before = chat_body(lms, body("What is your pid?", ["mcp/web"]))
    assert before["output"][0]["type"] == "tool_call"
    stream = stream_chat(lms, body("Now crash", ["mcp/web"]))
    (failure,) = stream.of("tool_call.failure")
    assert failure["metadata"]["tool_name"] == "web_crash"
    assert stream.text("message").endswith("The tool's server is gone.")
    assert stream.error is None
    mcp_http_server.restart()
    after = chat_body(lms, body("What is your pid?", ["mcp/web"]))
    call = after["output"][0]
    assert call["type"] == "tool_call" and call["output"] != before["output"][0]["output"], "a new process"
