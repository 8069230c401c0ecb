"""Stored conversation items ↔ chat messages, and the clean-up done before generating.

Conversation state is kept as Responses items (the richest shape, whichever dialect wrote
it); engines get messages. Before the engine sees them: function calls join the assistant turn
they belong to, reasoning rides along with the following assistant turn, duplicate tool results
and tool results with no call before them are dropped, and a tool result whose call is nowhere
in the history gets a synthesised assistant call in front of it (so a client may send results
without `previous_response_id`).

Server-side tool items: an `mcp_call` is an assistant tool call and its result (consecutive calls
share one assistant turn, as parallel calls do); `mcp_list_tools` and unanswered
`mcp_approval_request`s are not messages; a request answered by a denying
`mcp_approval_response` becomes the call and a result saying it was denied. An approved one is
run by the turn runner at the start of the turn and appears as the `mcp_call` that answers it.
"""

from __future__ import annotations

import logging
from typing import Any

from sluicegate.core.request import ContentPart, Message, ToolCall
from sluicegate.dialects.responses.mcp import error_text
from sluicegate.dialects.responses.tool_items import (
    CALL_ITEM_TYPES,
    OUTPUT_ITEM_TYPES,
    item_call,
    item_output,
)
from sluicegate.dialects.responses.tool_types import model_name

log = logging.getLogger(__name__)
Json = dict[str, Any]


def _text_of(parts: list[Json]) -> str:
    return "".join(p.get("text") or p.get("refusal") or "" for p in parts if isinstance(p, dict))


def _content(parts: list[Json]) -> str | list[ContentPart]:
    if not any(p.get("type") == "input_image" for p in parts):
        return _text_of(parts)
    out: list[ContentPart] = []
    for p in parts:
        if p.get("type") == "input_image":
            out.append(ContentPart("image", image_url=p["image_url"]))
        else:
            out.append(ContentPart("text", text=p.get("text") or p.get("refusal") or ""))
    return out


def items_to_messages(
    items: list[Json], instructions: str | None, known_calls: dict[str, Json] | None = None
) -> list[Message]:
    """Turn conversation items into chat messages; `known_calls` are stored calls by call_id."""
    messages: list[Message] = []
    if instructions:
        messages.append(Message(role="system", content=instructions))
    pending_reasoning: list[str] = []
    approvals: dict[str, Json] = {}  # mcp_approval_request items by id
    mcp_turn: Message | None = None  # the assistant turn consecutive mcp_calls join
    for item in items:
        kind = item.get("type")
        if kind == "mcp_call":
            mcp_turn = _mcp_call(item, messages, mcp_turn, pending_reasoning)
            continue
        if kind == "mcp_list_tools":
            continue
        mcp_turn = None
        if kind == "mcp_approval_request":
            approvals[item["id"]] = item
        elif kind == "mcp_approval_response" and not item.get("approve"):
            request = approvals.get(item["approval_request_id"])
            if request is not None:
                _denied(request, item.get("reason"), messages)
        elif kind == "message":
            message = Message(role=item["role"], content=_content(item.get("content", [])))
            if item["role"] == "assistant" and pending_reasoning:
                message.reasoning = "".join(pending_reasoning)
                pending_reasoning = []
            messages.append(message)
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            pending_reasoning.append(_text_of(parts))
        elif kind == "function_call" or kind in CALL_ITEM_TYPES:
            if kind == "function_call":
                name = model_name(item["name"], item.get("namespace"))
                call = ToolCall(item["call_id"], name, item.get("arguments", ""))
            else:
                call = item_call(item)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls.append(call)  # text and calls of one turn stay one message
            else:
                messages.append(Message(role="assistant", content="", tool_calls=[call]))
            if pending_reasoning and messages[-1].reasoning is None:
                messages[-1].reasoning = "".join(pending_reasoning)
                pending_reasoning = []
        elif kind == "function_call_output":
            messages.append(
                Message(role="tool", content=item.get("output", ""), tool_call_id=item["call_id"])
            )
        elif kind in OUTPUT_ITEM_TYPES and item.get("call_id"):
            messages.append(Message(role="tool", content=item_output(item), tool_call_id=item["call_id"]))
    return validate_sequence(messages, known_calls or {})


def _mcp_call(
    item: Json, messages: list[Message], turn: Message | None, reasoning: list[str]
) -> Message | None:
    """An `mcp_call` → its assistant call (joining the turn it follows) and its result.
    A call that never finished (no output, no error) is left out: it has no result to give."""
    output, error = item.get("output"), item.get("error")
    if output is None and error is None:
        return turn
    call = ToolCall(item["id"], item.get("name") or "", item.get("arguments") or "")
    last = messages[-1] if messages else None
    if turn is None and last is not None and last.role == "assistant":
        turn = last
    if turn is None:
        turn = Message(role="assistant", content="")
        messages.append(turn)
    turn.tool_calls.append(call)
    if reasoning and turn.reasoning is None:
        turn.reasoning = "".join(reasoning)
        reasoning.clear()
    result = output if output is not None else error_text(error)
    messages.append(Message(role="tool", content=result, tool_call_id=call.id))
    return turn


def _denied(request: Json, reason: str | None, messages: list[Message]) -> None:
    call = ToolCall(request["id"], request.get("name") or "", request.get("arguments") or "")
    text = "The user did not approve this tool call" + (f": {reason}" if reason else ".")
    messages.append(Message(role="assistant", content="", tool_calls=[call]))
    messages.append(Message(role="tool", content=text, tool_call_id=call.id))


def validate_sequence(messages: list[Message], known_calls: dict[str, Json]) -> list[Message]:
    """Drop duplicate and orphaned tool results; synthesise calls the history lacks."""
    out: list[Message] = []
    answered: set[str] = set()
    open_calls: set[str] = set()
    later_calls = {call.id for m in messages if m.role == "assistant" for call in m.tool_calls}
    for message in messages:
        if message.role == "assistant":
            open_calls.update(call.id for call in message.tool_calls)
            out.append(message)
            continue
        if message.role != "tool":
            out.append(message)
            continue
        call_id = message.tool_call_id or ""
        if call_id in answered:
            log.info("dropping a duplicate tool result for %s", call_id)
            continue
        if call_id not in open_calls:
            if call_id in later_calls:
                log.info("dropping a tool result for %s that comes before its call", call_id)
                continue
            stored = known_calls.get(call_id)
            if stored is None:
                log.info("synthesising the missing call %s before its result", call_id)
                stored = {"call_id": call_id, "name": "unknown_tool", "arguments": "{}"}
            out.append(
                Message(
                    role="assistant",
                    content="",
                    tool_calls=[
                        ToolCall(call_id, stored.get("name", "unknown_tool"), stored.get("arguments", "{}"))
                    ],
                )
            )
            open_calls.add(call_id)
        answered.add(call_id)
        out.append(message)
    return _drop_unanswered_calls(out)


def _drop_unanswered_calls(messages: list[Message]) -> list[Message]:
    """Results move up to sit right after their call (templates and upstreams require it);
    calls the conversation moved on from without any result (e.g. a call to a tool that did not
    exist) are dropped, as is an assistant turn left empty by that."""
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    out: list[Message] = []
    placed: set[int] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if id(message) not in placed:
                out.append(message)  # a result no call claimed (cannot happen after validation)
            continue
        out.append(message)
        if message.role != "assistant" or not message.tool_calls:
            continue
        moved_on = any(m.role != "tool" for m in messages[index + 1 :])
        kept = []
        for call in message.tool_calls:
            result = results.get(call.id)
            if result is not None:
                kept.append(call)
                out.append(result)
                placed.add(id(result))
            elif not moved_on:
                kept.append(call)  # the latest turn: its result may be what comes next
            else:
                log.info("dropping the unanswered tool call %s", call.id)
        message.tool_calls = kept
    return [
        m for m in out if not (m.role == "assistant" and not m.tool_calls and not m.text and not m.reasoning)
    ]


def orphan_call_ids(items: list[Json]) -> list[str]:
    """call_ids of tool results whose call is not among `items` (to look up in the store)."""
    calls = {i.get("call_id") for i in items if i.get("type") in ("function_call", *CALL_ITEM_TYPES)}
    outputs = ("function_call_output", *OUTPUT_ITEM_TYPES)
    return [
        i["call_id"]
        for i in items
        if i.get("type") in outputs and i.get("call_id") and i.get("call_id") not in calls
    ]
