"""The adjustments llama.cpp makes before a template sees a conversation.

A family's own are in its declaration (`Family.quirks`, parsing/quirks.py): gpt-oss and LFM2
read reasoning as `thinking`, Ministral 3 wants reasoning as a typed content block, DeepSeek V4
wants tool results in call order, and two templates carry checks llama.cpp patches out. The
template is recognised once, by the registry (`detect_family`). The ones here are read from
what a template says rather than whose it is: StepFun's wants trimmed text, and two are ours,
for conversations a template would otherwise refuse: Mistral's 9-character tool-call ids, and
several calls in one turn for a template that renders one per turn.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any

from sluicegate.engines.llamacpp.template_caps import TemplateCaps
from sluicegate.parsing import detect_family
from sluicegate.parsing.quirks import NO_QUIRKS, Quirks

Json = dict[str, Any]

_ALPHANUMERIC = string.ascii_letters + string.digits


def _quirks(source: str) -> Quirks:
    family = detect_family(source)
    return family.quirks if family is not None else NO_QUIRKS


def patched_source(source: str) -> str:
    """The template with the check its family's declaration names replaced by
    `{%- if false %}`, as llama.cpp's common_chat_templates_init does."""
    patch = _quirks(source).patch
    if patch and patch in source:
        source = source.replace(patch, "{%- if false %}")
    return source


def writes_channels(source: str) -> bool:
    """Whether the template writes gpt-oss's channels (a `developer` turn stays one, system
    turns are not merged, a continued message is continued in its channel)."""
    return _quirks(source).channels


def _wants_short_ids(source: str) -> bool:
    return "alphanumeric strings with length 9" in source


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
    """The conversation as this template (and its family's declaration) wants it handed over."""
    if "You have access to the following functions in JSONSchema format" in source:
        messages = _trimmed(messages)
    if _wants_short_ids(source):
        messages = _short_ids(messages)
    if caps.tool_calls and not caps.parallel_tool_calls:
        messages = _one_call_per_turn(messages)
    for quirk in _quirks(source).adjust:
        messages = quirk(source, messages)
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
