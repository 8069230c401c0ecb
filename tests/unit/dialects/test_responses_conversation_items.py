"""Responses items ↔ our conversation items: every kind maps, the stored form round-trips, and
an item written by another dialect comes out as a Responses item built from its fields."""

from __future__ import annotations

from sluicegate.core.items import (
    CallItem,
    MessageItem,
    ReasoningItem,
    ResultItem,
    ServerCallItem,
    item_from_json,
    item_to_json,
)
from sluicegate.core.request import ContentPart
from sluicegate.dialects.responses.conversation import from_item, to_item

ITEMS = [
    {
        "type": "message",
        "id": "msg_1",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hm"}],
        "encrypted_content": "sealed",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "f",
        "namespace": "ns",
        "arguments": "{}",
    },
    {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c2", "name": "grep", "input": "x"},
    {"type": "function_call_output", "id": "o1", "call_id": "c1", "output": "42"},
    {
        "type": "mcp_call",
        "id": "mcp_1",
        "name": "t",
        "arguments": "{}",
        "server_label": "s",
        "output": None,
        "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "boom"}]},
    },
    {"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "arguments": "{}", "server_label": "s"},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False, "reason": "no"},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": [{"name": "t"}]},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "blob"},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "web_search_call", "id": "ws_1"},
]


def test_every_item_is_echoed_exactly_and_its_stored_form_round_trips() -> None:
    for raw in ITEMS:
        item = to_item(raw)
        assert from_item(item) == raw
        assert item_from_json(item_to_json(item)) == item


def test_the_neutral_fields_are_what_the_model_reads() -> None:
    message = to_item(ITEMS[0])
    assert isinstance(message, MessageItem)
    assert message.parts == [
        ContentPart("text", text="look"),
        ContentPart("image", image_url="data:image/png;base64,AA"),
    ]
    reasoning = to_item(ITEMS[1])
    assert isinstance(reasoning, ReasoningItem) and (reasoning.text, reasoning.sealed) == ("hm", "sealed")
    call = to_item(ITEMS[2])
    assert isinstance(call, CallItem) and call.name != "f" and call.name.endswith("f")
    custom = to_item(ITEMS[3])
    assert isinstance(custom, CallItem) and (custom.call_id, custom.arguments) == ("c2", '{"input":"x"}')
    server = to_item(ITEMS[5])
    assert isinstance(server, ServerCallItem) and server.error == "boom"


def test_an_item_written_elsewhere_becomes_a_responses_item() -> None:
    built = from_item(MessageItem("assistant", [ContentPart("text", text="hi")], "msg_9"))
    assert built == {
        "type": "message",
        "id": "msg_9",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}],
    }
    assert from_item(ResultItem("c1", "ok"))["type"] == "function_call_output"
    assert to_item(from_item(CallItem("c1", "f", "{}"))).name == "f"  # type: ignore[union-attr]


def test_an_item_its_fields_rebuild_is_stored_once() -> None:
    plain = {
        "type": "message",
        "id": "msg_1",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    item = to_item(plain)
    assert item.native is None and from_item(item) == plain
    assert "native" not in item_to_json(item)
    assert to_item(ITEMS[0]).native == ITEMS[0]  # an image part's detail is not rebuilt: kept
