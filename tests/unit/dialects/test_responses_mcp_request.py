"""The Responses API's MCP parts: `{type: "mcp"}` tools, the approval policy, MCP input items,
and how stored MCP items become chat messages for the next turn."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.conversation.messages import items_to_messages
from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import Message, ProviderInfo, ServerTool
from sluicegate.dialects.responses.mcp_request import approval_policy
from sluicegate.dialects.responses.request import ResponsesRequest, parse_responses_request

Json = dict[str, Any]
DOCS = ProviderInfo("ephemeral_mcp", "docs", "docs")
CONFIGURED = ProviderInfo("plugin", "mcp/files", "files")


def parse(*tools: Json, **extra: Any) -> ResponsesRequest:
    return parse_responses_request({"model": "m", "input": "hi", "tools": list(tools), **extra})


def mcp(**fields: Any) -> Json:
    return {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/mcp", **fields}


def tool(name: str, provider: ProviderInfo = DOCS, **annotations: Any) -> ServerTool:
    return ServerTool(name, "", {"type": "object"}, provider, annotations=annotations)


def test_an_mcp_tool_is_a_server_and_is_echoed_without_its_headers() -> None:
    req = parse(
        mcp(
            headers={"X-Key": "secret"},
            authorization="tok",
            allowed_tools=["search"],
            require_approval="never",
            server_description="Docs",
        ),
        {"type": "function", "name": "f"},
    )
    (server,) = req.mcp_servers
    assert (server.server_label, server.server_url, server.allowed_tools) == (
        "docs",
        "https://mcp.example.com/mcp",
        ["search"],
    )
    assert server.headers == {"X-Key": "secret", "Authorization": "Bearer tok"}
    assert [t.name for t in req.tool_specs] == ["f"]  # the MCP tool is no function for the engine
    assert req.tools[0] == {
        "type": "mcp",
        "server_label": "docs",
        "server_url": "https://mcp.example.com/mcp",
        "headers": None,
        "allowed_tools": ["search"],
        "require_approval": "never",
        "server_description": "Docs",
    }
    assert "secret" not in repr(req.tools) and "tok" not in repr(req.tools)


def test_allowed_tools_as_a_filter_object_and_a_label_without_url() -> None:
    (server,) = parse(
        {"type": "mcp", "server_label": "files", "allowed_tools": {"tool_names": ["read"]}}
    ).mcp_servers
    assert (server.server_url, server.allowed_tools) == (None, ["read"])


@pytest.mark.parametrize(
    ("policy", "asked"),
    [
        (None, {"search", "delete", "read"}),  # OpenAI's default: always ask
        ("always", {"search", "delete", "read"}),
        ("never", set()),
        ({"never": {"tool_names": ["search"]}}, {"delete", "read"}),
        ({"always": {"tool_names": ["delete"]}}, {"delete"}),
        ({"never": {"read_only": True}}, {"search", "delete"}),
        ({"always": {"tool_names": ["delete"]}, "never": {"tool_names": ["search"]}}, {"delete", "read"}),
    ],
)
def test_require_approval(policy: Any, asked: set[str]) -> None:
    fields = {} if policy is None else {"require_approval": policy}
    needs = approval_policy(parse(mcp(**fields)).mcp_servers)
    tools = [tool("search"), tool("delete"), tool("read", readOnlyHint=True)]
    assert {t.name for t in tools if needs(t)} == asked
    assert not needs(tool("search", CONFIGURED))  # configured servers the request does not name


@pytest.mark.parametrize(
    ("bad", "param"),
    [
        ({"type": "mcp", "server_url": "https://x"}, "tools[0].server_label"),
        (mcp(server_url="ftp://x"), "tools[0].server_url"),
        (mcp(server_url=3), "tools[0].server_url"),
        (mcp(headers={"a": 1}), "tools[0].headers.a"),
        (mcp(allowed_tools=[1]), "tools[0].allowed_tools"),
        (mcp(allowed_tools={"read_only": True}), "tools[0].allowed_tools.read_only"),
        (mcp(require_approval="sometimes"), "tools[0].require_approval"),
        (mcp(require_approval={"never": {"tool_names": "x"}}), "tools[0].require_approval.never.tool_names"),
        (mcp(connector_id="connector_gmail"), "tools[0].connector_id"),
        ({"type": 3}, "tools[0].type"),  # a hosted tool (web_search) is accepted; a bad type is not
    ],
)
def test_bad_mcp_tools_name_the_parameter(bad: Json, param: str) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse(bad)
    assert (caught.value.info.status, caught.value.info.param) == (400, param)


def test_two_mcp_tools_may_not_share_a_label() -> None:
    with pytest.raises(SluicegateError) as caught:
        parse(mcp(), mcp())
    assert caught.value.info.param == "tools[1].server_label"


def test_tool_choice_naming_an_mcp_tool() -> None:
    req = parse(mcp(), tool_choice={"type": "mcp", "server_label": "docs", "name": "search"})
    assert req.canonical_tool_choice == "search"
    assert req.tool_choice == {"type": "mcp", "server_label": "docs", "name": "search"}
    with pytest.raises(SluicegateError) as caught:
        parse(mcp(), tool_choice={"type": "mcp", "server_label": "elsewhere"})
    assert caught.value.info.param == "tool_choice"


MCP_CALL = {
    "type": "mcp_call",
    "id": "mcp_1",
    "server_label": "docs",
    "name": "search",
    "arguments": '{"q": "x"}',
    "output": "hits",
    "error": None,
    "status": "completed",
}


def test_mcp_input_items_are_normalised() -> None:
    items = parse_responses_request(
        {
            "model": "m",
            "input": [
                {
                    "type": "mcp_list_tools",
                    "id": "mcpl_1",
                    "server_label": "docs",
                    "tools": [{"name": "search", "input_schema": {}}],
                },
                MCP_CALL,
                {
                    "type": "mcp_approval_request",
                    "id": "mcpr_1",
                    "server_label": "docs",
                    "name": "search",
                    "arguments": "{}",
                },
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": "mcpr_1",
                    "approve": False,
                    "reason": "no",
                },
            ],
        }
    ).input_items
    assert [i["type"] for i in items] == [
        "mcp_list_tools",
        "mcp_call",
        "mcp_approval_request",
        "mcp_approval_response",
    ]
    assert items[1] == {**MCP_CALL, "approval_request_id": None}
    answer = items[3]
    assert answer["id"].startswith("mcpa_")
    assert (answer["approval_request_id"], answer["approve"], answer["reason"]) == ("mcpr_1", False, "no")


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "mcp_approval_response", "approval_request_id": "mcpr_1"}, "input[0].approve"),
        ({"type": "mcp_approval_response", "approve": True}, "input[0].approval_request_id"),
        ({"type": "mcp_approval_response", "approval_request_id": "x", "approve": "yes"}, "input[0].approve"),
        ({**MCP_CALL, "name": None}, "input[0].name"),
        ({**MCP_CALL, "status": "done"}, "input[0].status"),
        ({"type": "mcp_list_tools", "server_label": "docs"}, "input[0].tools"),
    ],
)
def test_bad_mcp_items_name_the_parameter(item: Json, param: str) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_responses_request({"model": "m", "input": [item]})
    assert caught.value.info.param == param


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [(m.role, m.text, [(c.id, c.name) for c in m.tool_calls], m.tool_call_id) for m in messages]


USER = {"type": "message", "id": "msg_u", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
ANSWER = {
    "type": "message",
    "id": "msg_a",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}


def test_stored_mcp_calls_become_calls_and_results() -> None:
    second = {
        **MCP_CALL,
        "id": "mcp_2",
        "output": None,
        "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "down"}]},
    }
    listing = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []}
    messages = items_to_messages([USER, listing, MCP_CALL, second, ANSWER, USER], None)
    assert shape(messages) == [
        ("user", "q", [], None),
        ("assistant", "", [("mcp_1", "search"), ("mcp_2", "search")], None),
        ("tool", "hits", [], "mcp_1"),
        ("tool", "down", [], "mcp_2"),
        ("assistant", "done", [], None),
        ("user", "q", [], None),
    ]


def test_an_mcp_call_after_assistant_text_joins_that_turn() -> None:
    text = {**ANSWER, "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]}
    messages = items_to_messages([USER, text, MCP_CALL], None)
    assert shape(messages) == [
        ("user", "q", [], None),
        ("assistant", "Let me look.", [("mcp_1", "search")], None),
        ("tool", "hits", [], "mcp_1"),
    ]


def test_an_unfinished_mcp_call_is_left_out() -> None:
    running = {**MCP_CALL, "output": None, "status": "incomplete"}
    assert shape(items_to_messages([USER, running, ANSWER], None)) == [
        ("user", "q", [], None),
        ("assistant", "done", [], None),
    ]


REQUEST = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "server_label": "docs",
    "name": "search",
    "arguments": "{}",
}


def test_a_denied_approval_tells_the_model() -> None:
    denied = {
        "type": "mcp_approval_response",
        "id": "mcpa_1",
        "approval_request_id": "mcpr_1",
        "approve": False,
        "reason": "too costly",
    }
    messages = items_to_messages([USER, REQUEST, denied], None)
    assert shape(messages) == [
        ("user", "q", [], None),
        ("assistant", "", [("mcpr_1", "search")], None),
        ("tool", "The user did not approve this tool call: too costly", [], "mcpr_1"),
    ]


def test_unanswered_and_approved_requests_are_not_messages() -> None:
    approved = {
        "type": "mcp_approval_response",
        "id": "mcpa_1",
        "approval_request_id": "mcpr_1",
        "approve": True,
    }
    assert shape(items_to_messages([USER, REQUEST], None)) == [("user", "q", [], None)]
    run = {**MCP_CALL, "id": "mcp_9", "approval_request_id": "mcpr_1"}
    assert shape(items_to_messages([USER, REQUEST, approved, run], None)) == [
        ("user", "q", [], None),
        ("assistant", "", [("mcp_9", "search")], None),
        ("tool", "hits", [], "mcp_9"),
    ]
