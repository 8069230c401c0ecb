"""Server-side tool items as Responses output items: `mcp_list_tools`, `mcp_call`,
`mcp_approval_request` (field names as in the openai SDK's `response_output_item.py`).

The canonical stream has a server call (a TOOL_CALL item with a provider) and its outcome (a
TOOL_RESULT item with the same `call_id`) as two items; the Responses API has one `mcp_call`
item that stays open until its outcome is known. So TOOL_RESULT items produce no output item of
their own: their output and error complete the call they answer (`output_items` here, and the
encoder's held `output_item.done`). A result whose call is not in the same response (cannot
happen with the tool loop, but stored state is data) becomes an `mcp_call` of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluicegate.core.events import Item, ItemKind

Json = dict[str, Any]
APPROVAL_PREFIX = "mcpr_"  # ids of approval requests; an approved call's call_id is that id


def is_server_call(item: Item) -> bool:
    return item.kind is ItemKind.TOOL_CALL and item.provider is not None


def is_server_result(item: Item) -> bool:
    return item.kind is ItemKind.TOOL_RESULT and item.provider is not None


def server_label(item: Item) -> str:
    return item.provider.server_label if item.provider is not None else ""


def call_error(message: str) -> Json:
    """A failed call's `error` (the SDK's `McpToolExecutionError`)."""
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}


def error_text(error: Any) -> str:
    """The message of an `mcp_call.error`, as sent by us or by a client (string or object)."""
    if error is None:
        return ""
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        content = error.get("content")
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            return content
    return str(error)


def mcp_call_item(call: Item, result: Item | None, open_status: str) -> Json:
    """The `mcp_call` for a server call and its result (None while the tool runs)."""
    if result is not None:
        status = "failed" if result.error is not None else "completed"
    elif call.cut_short:
        status = "incomplete"
    else:
        status = open_status
    call_id = call.call_id or ""
    return {
        "type": "mcp_call",
        "id": call.id,
        "server_label": server_label(call),
        "name": call.name or "",
        "arguments": call.text_so_far,
        "output": result.text if result is not None else None,
        "error": call_error(result.error) if result is not None and result.error is not None else None,
        "status": status,
        "approval_request_id": call_id if call_id.startswith(APPROVAL_PREFIX) else None,
    }


def orphan_result_item(result: Item) -> Json:
    """A result with no call in this response, as a finished `mcp_call` of its own."""
    return {
        "type": "mcp_call",
        "id": result.id,
        "server_label": server_label(result),
        "name": result.name or "",
        "arguments": "",
        "output": result.text,
        "error": call_error(result.error) if result.error is not None else None,
        "status": "failed" if result.error is not None else "completed",
        "approval_request_id": None,
    }


def mcp_list_tools_item(item: Item, *, empty: bool = False) -> Json:
    """The listing; `empty` for `output_item.added`, before the tools are known (as OpenAI)."""
    tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "annotations": tool.annotations or None,
        }
        for tool in ([] if empty else item.tools)
    ]
    return {
        "type": "mcp_list_tools",
        "id": item.id,
        "server_label": server_label(item),
        "tools": tools,
        "error": None if empty else item.error,
    }


def mcp_approval_request_item(item: Item) -> Json:
    return {
        "type": "mcp_approval_request",
        "id": item.id,
        "server_label": server_label(item),
        "name": item.name or "",
        "arguments": item.text_so_far,
    }


def output_items(items: list[Item], one: Callable[[Item], Json], open_status: str) -> list[Json]:
    """Items as the response's `output`: server results folded into their calls; `one`
    renders every other item."""
    calls = {item.call_id for item in items if is_server_call(item)}
    results = {item.call_id: item for item in items if is_server_result(item) and item.call_id in calls}
    out: list[Json] = []
    for item in items:
        if is_server_call(item):
            out.append(mcp_call_item(item, results.get(item.call_id), open_status))
        elif is_server_result(item):
            if item.call_id not in calls:
                out.append(orphan_result_item(item))
        else:
            out.append(one(item))
    return out
