"""Canonical items as Responses output items (what the encoder sends and the store keeps).

Turning stored items back into messages for an engine is the conversation's job
(`sluicegate/conversation/messages.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from sluicegate.core.events import Item, ItemKind, TokenLogprob
from sluicegate.dialects.responses.mcp import mcp_approval_request_item, mcp_list_tools_item
from sluicegate.dialects.responses.tool_types import ClientTool, call_item

log = logging.getLogger(__name__)
Json = dict[str, Any]


def logprob_entries(entries: list[TokenLogprob]) -> list[Json]:
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes or [],
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes or []} for t in e.top],
        }
        for e in entries
    ]


def output_item(item: Item, status: str, tools: dict[str, ClientTool] | None = None) -> Json:
    """A canonical item as a Responses output item, in its final (or current) state; `tools`
    says how the request's client tools render their calls (`function_call` by default)."""
    text = item.text_so_far
    kind = item.kind
    if kind is ItemKind.MESSAGE:
        part: Json = {
            "type": "output_text",
            "text": text,
            "annotations": [],
            "logprobs": logprob_entries(item.logprobs),
        }
        return {"type": "message", "id": item.id, "status": status, "role": "assistant", "content": [part]}
    if kind is ItemKind.REFUSAL:
        refusal = {"type": "refusal", "refusal": text}
        return {"type": "message", "id": item.id, "status": status, "role": "assistant", "content": [refusal]}
    if kind is ItemKind.REASONING:
        return {
            "type": "reasoning",
            "id": item.id,
            "summary": [],
            "content": [{"type": "reasoning_text", "text": text}],
        }
    if kind is ItemKind.TOOL_CALL and tools and item.provider is None and (item.name or "") in tools:
        return call_item(tools[item.name or ""], item.id, item.call_id or "", text, status)
    if kind is ItemKind.TOOL_CALL:
        return {
            "type": "function_call",
            "id": item.id,
            "call_id": item.call_id,
            "name": item.name or "",
            "arguments": text,
            "status": status,
        }
    if kind is ItemKind.TOOL_LIST:
        return mcp_list_tools_item(item)
    if kind is ItemKind.APPROVAL_REQUEST:
        return mcp_approval_request_item(item)
    return {
        "type": "function_call_output",
        "id": item.id,
        "call_id": item.call_id,
        "output": text,
        "status": status,
    }
