"""Anthropic Messages with configured MCP servers, driven by the anthropic SDK: their tools run
server-side in the tool loop; the client sees every round's text and only its own tool_use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from e2e_support import Server
from tools_support import MODEL, tools_server

from mcp_fixtures import mcp_http_server

pytestmark = pytest.mark.e2e
__all__ = ["mcp_http_server", "tools_server"]  # fixtures, imported for pytest

WEATHER = "What is the weather in Paris?"
ANSWER = "It is 18°C with light rain in Paris."


@pytest.fixture
def claude(tools_server: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=tools_server.base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        yield sdk


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


def test_an_mcp_tool_runs_server_side(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=MODEL, max_tokens=1000, messages=user(WEATHER)) as stream:
        events = [event.type for event in stream]
        message = stream.get_final_message()
    assert "input_json" not in events
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == ANSWER  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5 + 2 + 8, "both rounds"
    created = claude.messages.create(model=MODEL, max_tokens=1000, messages=user(WEATHER))
    assert [block.type for block in created.content] == ["thinking", "text"]


def test_mixed_calls_show_the_client_only_its_own(claude: anthropic.Anthropic) -> None:
    tool = {
        "name": "get_time",
        "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    }
    with claude.messages.stream(
        model=MODEL,
        max_tokens=1000,
        messages=user("mixed calls please"),
        tools=[tool],  # type: ignore[list-item]
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    calls = [block for block in message.content if block.type == "tool_use"]
    assert [(call.name, call.input) for call in calls] == [("get_time", {"zone": "UTC"})]
