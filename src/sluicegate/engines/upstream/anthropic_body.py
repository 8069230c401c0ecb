"""ChatRequest → the streaming Messages body an Anthropic-compatible upstream receives.

Whatever dialect the client spoke: system messages become `system`, tool results become
`tool_result` blocks of a user turn, consecutive turns of one role are merged (the Messages API
wants them alternating), and reasoning effort becomes extended thinking with a budget. A
thinking block is sent back only with the signature the upstream gave it (remembered by
`Signatures`); without one the upstream would refuse the turn, so thinking is then left off for
a continued tool turn instead.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from sluicegate.core.request import ChatRequest, ContentPart, Message, ToolSpec

DEFAULT_MAX_TOKENS = 16384  # Anthropic requires max_tokens; this when the client set none
THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32000}
MIN_THINKING_BUDGET = 1024  # Anthropic's minimum
OFF = ("none", "off")
SIGNATURES_KEPT = 4096


class Signatures:
    """The upstream's signatures for thinking it produced, by thinking text (bounded, LRU):
    clients of other dialects send reasoning back as text, and the upstream needs its signature."""

    def __init__(self, limit: int = SIGNATURES_KEPT) -> None:
        self._by_text: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def remember(self, thinking: str, signature: str) -> None:
        if not thinking or not signature:
            return
        self._by_text[thinking] = signature
        self._by_text.move_to_end(thinking)
        while len(self._by_text) > self._limit:
            self._by_text.popitem(last=False)

    def get(self, thinking: str) -> str | None:
        return self._by_text.get(thinking)


def _image(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: str | list[ContentPart]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [
        {"type": "text", "text": part.text} if part.type == "text" else _image(part.image_url)
        for part in content
        if part.type != "text" or part.text
    ]


def _input(arguments: str) -> Any:
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def _assistant_blocks(message: Message, signatures: Signatures) -> tuple[list[dict[str, Any]], bool]:
    """The assistant turn's blocks, and whether its reasoning could be sent back signed."""
    blocks: list[dict[str, Any]] = []
    signed = True
    if message.reasoning:
        signature = signatures.get(message.reasoning)
        if signature is not None:
            blocks.append({"type": "thinking", "thinking": message.reasoning, "signature": signature})
        else:
            signed = False
    blocks += _blocks(message.content)
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}
        for call in message.tool_calls
    ]
    return blocks, signed and bool(message.reasoning)


def _tool(tool: ToolSpec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": tool.name,
        "input_schema": tool.parameters or {"type": "object", "properties": {}},
    }
    if tool.description:
        body["description"] = tool.description
    return body


def _tool_choice(request: ChatRequest) -> dict[str, Any]:
    choice = request.tool_choice
    if choice == "required":
        body: dict[str, Any] = {"type": "any"}
    elif choice in ("auto", "none"):
        body = {"type": choice}
    else:
        body = {"type": "tool", "name": choice}
    if not request.parallel_tool_calls and choice != "none":
        body["disable_parallel_tool_use"] = True
    return body


def messages_body(request: ChatRequest, upstream_model: str, signatures: Signatures) -> dict[str, Any]:
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    continued_tool_turn = False  # the last assistant turn called tools and their results follow
    unsigned_tool_turn = False

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in request.messages:
        if message.role in ("system", "developer"):
            system.append(message.text)
        elif message.role == "user":
            add("user", _blocks(message.content) or [{"type": "text", "text": " "}])
            continued_tool_turn = False
        elif message.role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                # Its images too, as Anthropic's tool_result blocks carry them.
                "content": message.content if isinstance(message.content, str) else _blocks(message.content),
            }
            add("user", [result])
        else:
            blocks, signed = _assistant_blocks(message, signatures)
            add("assistant", blocks)
            continued_tool_turn = bool(message.tool_calls)
            unsigned_tool_turn = continued_tool_turn and not signed

    s = request.sampling
    max_tokens = s.max_tokens or DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": max_tokens,
        "messages": turns,
        "stream": True,
    }
    if system:
        body["system"] = "\n\n".join(text for text in system if text)
    if request.tools and request.tool_choice != "none":
        body["tools"] = [_tool(t) for t in request.tools]
        body["tool_choice"] = _tool_choice(request)
    for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("top_k", s.top_k)):
        if value is not None:
            body[key] = value
    if s.stop:
        body["stop_sequences"] = s.stop
    effort = request.reasoning_effort
    # A continued tool turn must start with the signed thinking of the turn that called the tools.
    if effort is not None and effort not in OFF and not (continued_tool_turn and unsigned_tool_turn):
        budget = min(THINKING_BUDGET.get(effort, THINKING_BUDGET["medium"]), max_tokens - 1)
        if budget >= MIN_THINKING_BUDGET:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body.pop("temperature", None)  # thinking allows only the default temperature
            body.pop("top_k", None)
    fmt = request.response_format
    if fmt and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return body
