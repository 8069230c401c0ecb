"""Render a conversation with the model's own Jinja2 chat template, the way Hugging Face does.

The messages and tools are handed over in the shape HF templates expect (OpenAI-style dicts:
assistant `tool_calls` with `function.arguments` as an object, tool results with their call id
and tool name), in a sandbox, with the globals those templates use.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from sluicegate.core.errors import invalid
from sluicegate.core.json_limits import DEFAULT_MAX_JSON_DEPTH, json_depth_exceeds
from sluicegate.core.request import Message, ToolSpec
from sluicegate.engines.base import ConfigError


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
) -> str:
    # HF's tojson: no HTML escaping (Jinja's own would turn `<` into `\u003c`).
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def template_source(value: str, base_dir: Path) -> str:
    """A config's `chat_template`: a path to a file (relative to the config) or the template itself."""
    if "{" not in value:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read chat_template {path}: {exc.strerror}") from exc
    try:
        compile_template(value)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"chat_template is not a valid Jinja2 template: {exc}") from exc
    return value


def _arguments(text: str) -> Any:
    """Tool-call arguments as an object (HF templates `tojson` them); kept as text if not JSON,
    or if nested deeper than any request body may be (rendering recurses per level)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return text if json_depth_exceeds(value, DEFAULT_MAX_JSON_DEPTH) else value


def _content(message: Message, media_marker: str | None) -> str:
    """The message's text; with a media marker, each image stands where it was as the marker
    (as llama-server hands a template image parts), for libmtmd to put the image there."""
    if media_marker is None or isinstance(message.content, str):
        return message.text
    return "".join(part.text if part.type == "text" else media_marker for part in message.content)


def template_messages(messages: list[Message], media_marker: str | None = None) -> list[dict[str, Any]]:
    """Messages in the OpenAI/HF dict shape; leading system and developer turns become one system."""
    out: list[dict[str, Any]] = []
    tool_names: dict[str, str] = {}
    for message in messages:
        role = "system" if message.role == "developer" else message.role
        if role == "system" and out and out[-1]["role"] == "system" and len(out) == 1:
            out[-1]["content"] += "\n\n" + _content(message, media_marker)
            continue
        entry: dict[str, Any] = {"role": role, "content": _content(message, media_marker)}
        if role == "assistant":
            if message.reasoning:
                entry["reasoning_content"] = message.reasoning
            if message.tool_calls:
                entry["content"] = message.text or None
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": _arguments(call.arguments)},
                    }
                    for call in message.tool_calls
                ]
                tool_names.update((call.id, call.name) for call in message.tool_calls)
        elif role == "tool":
            entry["tool_call_id"] = message.tool_call_id
            name = message.name or tool_names.get(message.tool_call_id or "")
            if name:
                entry["name"] = name
        out.append(entry)
    return out


def template_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def render_chat(
    source: str,
    messages: list[Message],
    tools: list[ToolSpec],
    *,
    bos_token: str,
    eos_token: str,
    enable_thinking: bool | None = None,
    media_marker: str | None = None,
) -> str:
    """The prompt text, ending with the assistant's generation prompt; template errors are 400s."""
    variables: dict[str, Any] = {
        "messages": template_messages(messages, media_marker),
        "add_generation_prompt": True,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    if tools:
        variables["tools"] = template_tools(tools)
    if enable_thinking is not None:
        variables["enable_thinking"] = enable_thinking
    try:
        return compile_template(source).render(**variables)
    except jinja2.TemplateError as exc:
        raise invalid(
            f"The model's chat template rejected the conversation: {exc}", code="template_error"
        ) from exc
