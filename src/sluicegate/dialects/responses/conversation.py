"""Responses items ↔ our conversation items (`core/items.py`).

`to_item` maps an input or output item into the neutral form (it is also the reader of records
stored before that form, which held Responses items); `from_item` maps one back, exactly as the
client sent or saw it when this dialect wrote it (`native`), built from its fields otherwise (an
LM Studio chat listed or continued here).
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.ids import new_id
from sluicegate.core.items import (
    ApprovalRequestItem,
    ApprovalResponseItem,
    CallItem,
    CompactionItem,
    ConversationItem,
    MessageItem,
    OpaqueItem,
    ReasoningItem,
    ReferenceItem,
    ResultItem,
    ServerCallItem,
    ToolListItem,
)
from sluicegate.core.request import ContentPart
from sluicegate.dialects.responses.mcp import call_error, error_text
from sluicegate.dialects.responses.tool_items import (
    CALL_ITEM_TYPES,
    OUTPUT_ITEM_TYPES,
    item_call,
    item_output,
)
from sluicegate.dialects.responses.tool_types import model_name

Json = dict[str, Any]
ORIGIN = "responses"


def _text_of(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(p.get("text") or p.get("refusal") or "" for p in parts if isinstance(p, dict))


def _parts(content: Any) -> list[ContentPart]:
    if isinstance(content, str):
        return [ContentPart("text", text=content)]
    out: list[ContentPart] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        if p.get("type") == "input_image":
            out.append(ContentPart("image", image_url=p.get("image_url") or ""))
        else:
            out.append(ContentPart("text", text=p.get("text") or p.get("refusal") or ""))
    return out


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text_of(output)
    return "" if output is None else str(output)


def to_item(item: Json) -> ConversationItem:
    """One Responses item (input or output) as a conversation item; its `native` form is kept
    only when building it from the fields would not give it back (stored once, not twice)."""
    mapped = _to_item(item)
    if mapped.native is not None and _built(mapped) == item:
        mapped.native = None
    return mapped


def _built(item: ConversationItem) -> Json:
    native, item.native = item.native, None
    try:
        return from_item(item)
    finally:
        item.native = native


def _to_item(item: Json) -> ConversationItem:
    kind = item.get("type")
    ident = item.get("id") if isinstance(item.get("id"), str) else None
    meta: dict[str, Any] = {"origin": ORIGIN, "native": item}
    if kind == "message":
        return MessageItem(item.get("role") or "user", _parts(item.get("content", [])), ident, **meta)
    if kind == "reasoning":
        text = _text_of(item.get("content") or item.get("summary") or [])
        return ReasoningItem(text, item.get("encrypted_content") or None, ident, **meta)
    if kind == "function_call":
        name = model_name(item.get("name") or "", item.get("namespace"))
        return CallItem(item.get("call_id") or "", name, item.get("arguments") or "", ident, **meta)
    if kind in CALL_ITEM_TYPES:
        call = item_call(item)
        return CallItem(call.id, call.name, call.arguments, ident, **meta)
    if kind == "function_call_output":
        return ResultItem(item.get("call_id") or "", _output_text(item.get("output", "")), ident, **meta)
    if kind in OUTPUT_ITEM_TYPES and item.get("call_id"):
        return ResultItem(item["call_id"], item_output(item), ident, **meta)
    if kind == "mcp_call":
        error = item.get("error")
        return ServerCallItem(
            ident or "",
            item.get("name") or "",
            item.get("arguments") or "",
            item.get("server_label") or "",
            item.get("output"),
            None if error is None else error_text(error),
            item.get("approval_request_id"),
            **meta,
        )
    if kind == "mcp_list_tools":
        return ToolListItem(
            ident or "", item.get("server_label") or "", list(item.get("tools") or []), **meta
        )
    if kind == "mcp_approval_request":
        return ApprovalRequestItem(
            ident or "",
            item.get("name") or "",
            item.get("arguments") or "",
            item.get("server_label") or "",
            **meta,
        )
    if kind == "mcp_approval_response":
        return ApprovalResponseItem(
            item.get("approval_request_id") or "",
            bool(item.get("approve")),
            item.get("reason"),
            ident,
            **meta,
        )
    if kind == "compaction":
        return CompactionItem(item.get("encrypted_content") or "", ident, **meta)
    if kind == "item_reference":
        return ReferenceItem(ident or "", **meta)
    return OpaqueItem(ident, **meta)


def to_items(items: list[Json]) -> list[ConversationItem]:
    return [to_item(i) for i in items if isinstance(i, dict)]


def from_item(item: ConversationItem) -> Json:
    """A conversation item as a Responses item."""
    if item.origin == ORIGIN and item.native is not None:
        return item.native  # exactly as the client sent or saw it
    if isinstance(item, MessageItem):
        return _message(item)
    if isinstance(item, ReasoningItem):
        out: Json = {
            "type": "reasoning",
            "id": item.id or new_id("rs_"),
            "summary": [],
            "content": [{"type": "reasoning_text", "text": item.text}],
        }
        if item.sealed:
            out["encrypted_content"] = item.sealed
        return out
    if isinstance(item, CallItem):
        return {
            "type": "function_call",
            "id": item.id or new_id("fc_"),
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
            "status": "completed",
        }
    if isinstance(item, ResultItem):
        return {
            "type": "function_call_output",
            "id": item.id or new_id("fco_"),
            "call_id": item.call_id,
            "output": item.output,
            "status": "completed",
        }
    if isinstance(item, ServerCallItem):
        return {
            "type": "mcp_call",
            "id": item.id,
            "name": item.name,
            "arguments": item.arguments,
            "server_label": item.server_label,
            "output": item.output,
            "error": None if item.error is None else call_error(item.error),
            "approval_request_id": item.approval_request_id,
            "status": "failed" if item.error is not None else "completed",
        }
    if isinstance(item, ApprovalRequestItem):
        return {
            "type": "mcp_approval_request",
            "id": item.id,
            "name": item.name,
            "arguments": item.arguments,
            "server_label": item.server_label,
        }
    if isinstance(item, ApprovalResponseItem):
        return {
            "type": "mcp_approval_response",
            "id": item.id or new_id("mcpa_"),
            "approval_request_id": item.request_id,
            "approve": item.approve,
            "reason": item.reason,
        }
    if isinstance(item, ToolListItem):
        return {
            "type": "mcp_list_tools",
            "id": item.id,
            "server_label": item.server_label,
            "tools": item.tools,
        }
    if isinstance(item, CompactionItem):
        return {"type": "compaction", "id": item.id or new_id("cmp_"), "encrypted_content": item.sealed}
    if isinstance(item, ReferenceItem):
        return {"type": "item_reference", "id": item.id}
    return dict(item.native or {"type": "unknown", "id": item.id})


def _message(item: MessageItem) -> Json:
    assistant = item.role == "assistant"
    content: list[Json] = []
    for part in item.parts:
        if part.type == "image":
            content.append({"type": "input_image", "image_url": part.image_url, "detail": "auto"})
        elif assistant:
            content.append({"type": "output_text", "text": part.text, "annotations": [], "logprobs": []})
        else:
            content.append({"type": "input_text", "text": part.text})
    return {
        "type": "message",
        "id": item.id or new_id("msg_"),
        "role": item.role,
        "content": content,
        "status": "completed",
    }


def from_items(items: list[ConversationItem]) -> list[Json]:
    return [from_item(i) for i in items]
