"""The per-family adjustments llama.cpp makes before a template sees a conversation.

Each is recognised from the template's source, as llama.cpp's `common/chat.cpp` and
`common/parsers/*.cpp` recognise them: gpt-oss and LFM2 read reasoning as `thinking`,
Ministral 3 wants reasoning as a typed content block, DeepSeek V4 wants tool results in call
order, StepFun wants trimmed text, and two templates carry checks llama.cpp patches out. Two
more are ours, for conversations a template would otherwise refuse: Mistral's 9-character
tool-call ids, and several calls in one turn for a template that renders one per turn.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any

from sluicegate.engines.llamacpp.template_caps import TemplateCaps

Json = dict[str, Any]

# Checks llama.cpp replaces with `{%- if false %}` (chat.cpp, common_chat_templates_init).
_SOURCE_PATCHES = (
    (
        "<|channel|>",
        '{%- if "<|channel|>analysis<|message|>" in message.content or '
        '"<|channel|>final<|message|>" in message.content %}',
    ),
    (
        "[TOOL_CALLS]",
        "{%- if (message['content'] is none or message['content'] == '' or "
        "message['content']|length == 0) and (message['tool_calls'] is not defined or "
        "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
    ),
)
_ALPHANUMERIC = string.ascii_letters + string.digits


def patched_source(source: str) -> str:
    for marker, check in _SOURCE_PATCHES:
        if marker in source and check in source:
            source = source.replace(check, "{%- if false %}")
    return source


def is_gpt_oss(source: str) -> bool:
    return "<|channel|>" in source


def _is_lfm2(source: str) -> bool:
    return ("<|tool_list_start|>" in source and "<|tool_list_end|>" in source) or (
        "List of tools: [" in source and "<|tool_list_start|>" not in source
    )


def _is_ministral3(source: str) -> bool:
    return (
        all(m in source for m in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")) and "[CALL_ID]" not in source
    )


def _is_deepseek_v4(source: str) -> bool:
    return "dsml_token" in source and "DSML" in source and "function_calls" not in source


def _wants_short_ids(source: str) -> bool:
    return "alphanumeric strings with length 9" in source


def _thinking(messages: list[Json], drop_content_with_calls: bool) -> list[Json]:
    out = []
    for message in messages:
        message = dict(message)
        if isinstance(message.get("reasoning_content"), str):
            message["thinking"] = message["reasoning_content"]
            if drop_content_with_calls and message.get("tool_calls"):
                message.pop("content", None)
        out.append(message)
    return out


def _ministral3(messages: list[Json]) -> list[Json]:
    """System and assistant turns as typed blocks, reasoning as a `thinking` block."""
    out = []
    for message in messages:
        if message["role"] not in ("system", "assistant"):
            out.append(message)
            continue
        blocks: list[Json] = []
        if isinstance(message.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": message["reasoning_content"]})
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        adjusted = {k: v for k, v in message.items() if k != "reasoning_content"}
        adjusted["content"] = blocks
        out.append(adjusted)
    return out


def _tool_results_in_call_order(messages: list[Json]) -> list[Json]:
    """DeepSeek V4: a run of tool results (user turns may sit among them) in its calls' order."""
    out = list(messages)
    order: dict[str, int] = {}
    i = 0
    while i < len(out):
        role = out[i]["role"]
        if role == "assistant" and out[i].get("tool_calls"):
            order = {c["id"]: n for n, c in enumerate(out[i]["tool_calls"]) if c.get("id")}
            i += 1
            continue
        if role not in ("user", "tool"):
            i += 1
            continue
        end = i
        while end < len(out) and out[end]["role"] in ("user", "tool"):
            end += 1
        positions = [p for p in range(i, end) if out[p]["role"] == "tool"]
        if len(positions) > 1 and order:
            results = sorted(
                (out[p] for p in positions), key=lambda m: order.get(m.get("tool_call_id", ""), 0)
            )
            for p, result in zip(positions, results, strict=True):
                out[p] = result
        i = max(end, i + 1)
    return out


def _trimmed(messages: list[Json]) -> list[Json]:
    out = []
    for message in messages:
        message = dict(message)
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                message[key] = message[key].strip()
        if isinstance(message.get("content"), list):
            message["content"] = [
                {**p, "text": p["text"].strip()} if p.get("type") == "text" else p for p in message["content"]
            ]
        out.append(message)
    return out


def short_id(call_id: str) -> str:
    """A call id as Mistral's templates demand it: 9 letters and digits, the same for the same id."""
    if len(call_id) == 9 and call_id.isalnum():
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join(_ALPHANUMERIC[b % len(_ALPHANUMERIC)] for b in digest[:9])


def _short_ids(messages: list[Json]) -> list[Json]:
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**c, "id": short_id(c["id"])} if c.get("id") else c for c in message["tool_calls"]
            ]
        if message.get("tool_call_id"):
            message["tool_call_id"] = short_id(message["tool_call_id"])
        out.append(message)
    return out


def _one_call_per_turn(messages: list[Json]) -> list[Json]:
    """Several calls in one turn become consecutive turns of one call, each followed by its result."""
    out: list[Json] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or len(calls) < 2:
            out.append(message)
            i += 1
            continue
        end = i + 1
        while end < len(messages) and messages[end]["role"] == "tool":
            end += 1
        results = messages[i + 1 : end]
        by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id")}
        unmatched = [r for r in results if r.get("tool_call_id") not in {c.get("id") for c in calls}]
        for n, call in enumerate(calls):
            turn = {**message, "tool_calls": [call]}
            if n:
                turn["content"] = ""
                turn.pop("reasoning_content", None)
                turn.pop("thinking", None)
            out.append(turn)
            result = by_id.pop(call.get("id"), None) or (unmatched.pop(0) if unmatched else None)
            if result is not None:
                out.append(result)
        out.extend(by_id.values())
        out.extend(unmatched)
        i = end
    return out


def adjust(source: str, messages: list[Json], caps: TemplateCaps) -> list[Json]:
    """The conversation as this template's family wants it handed over."""
    if "You have access to the following functions in JSONSchema format" in source:
        messages = _trimmed(messages)
    if _wants_short_ids(source):
        messages = _short_ids(messages)
    if caps.tool_calls and not caps.parallel_tool_calls:
        messages = _one_call_per_turn(messages)
    if is_gpt_oss(source):
        messages = _thinking(messages, drop_content_with_calls=True)
    elif _is_lfm2(source):
        messages = _thinking(messages, drop_content_with_calls=False)
    elif _is_ministral3(source):
        messages = _ministral3(messages)
    elif _is_deepseek_v4(source):
        messages = _tool_results_in_call_order(messages)
    return messages


def _as_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _call_lines(message: Json) -> str:
    calls = [
        json.dumps(
            {"name": c["function"]["name"], "arguments": _as_object(c["function"]["arguments"])},
            ensure_ascii=False,
        )
        for c in message["tool_calls"]
    ]
    content = message.get("content")
    return "\n".join([content, *calls] if isinstance(content, str) and content else calls)


def calls_as_text(messages: list[Json]) -> list[Json]:
    """For a template that renders no tool calls: an assistant turn's calls become its text
    (one JSON object a line), so the model still sees what it called."""
    out = []
    for message in messages:
        if message.get("tool_calls") and isinstance(message.get("content", ""), str):
            text = _call_lines(message)
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            message["content"] = text
        out.append(message)
    return out


def without_tool_turns(messages: list[Json]) -> list[Json]:
    """For a template that knows no tool turns at all: calls become the assistant's text,
    results become user turns, and turns of one role in a row are joined, so a template that
    insists on alternating roles still renders the exchange."""
    out: list[Json] = []
    for message in calls_as_text(messages):
        role, content = message["role"], message.get("content") or ""
        if not isinstance(content, str):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role == "tool":
            role = "user"
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"] += "\n" + content
            continue
        out.append({"role": role, "content": content})
    return out
