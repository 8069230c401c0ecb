"""Render a conversation with the model's own chat template, the way llama.cpp does.

The messages and tools are handed over in the shape llama.cpp's `common/chat.cpp` gives
templates (OpenAI-style dicts: `content` always a string, `reasoning_content` when there is
some, tool calls with their id, tool results with the call id and tool name), adjusted to what
the template can take (`template_caps`), in llama.cpp's Jinja environment (`jinja_env`).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2

from sluicegate.core.errors import invalid
from sluicegate.core.json_limits import DEFAULT_MAX_JSON_DEPTH, json_depth_exceeds
from sluicegate.core.request import ChatRequest, Message, ToolSpec
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp.fallback_templates import BUILTIN
from sluicegate.engines.llamacpp.jinja_env import TemplateRaised, compile_template
from sluicegate.engines.llamacpp.template_caps import TemplateCaps, template_caps
from sluicegate.engines.llamacpp.template_quirks import (
    adjust,
    calls_as_text,
    patched_source,
    without_tool_turns,
    writes_channels,
)
from sluicegate.parsing import ReasoningStyle

Json = dict[str, Any]
# Efforts a template may read as `reasoning_effort` (gpt-oss, DeepSeek V4 …); on/off only switch thinking.
EFFORT_LEVELS = ("minimal", "low", "medium", "high", "xhigh", "max")


def template_source(value: str, base_dir: Path) -> str:
    """A config's `chat_template`: a path to a file (relative to the config), the name of one of
    llama.cpp's built-in templates (`chatml`, `llama3`, ...: when no such file exists), or the
    template itself."""
    if "{" not in value:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if value in BUILTIN and not path.exists():
            return BUILTIN[value]
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            names = ", ".join(sorted(BUILTIN))
            raise ConfigError(
                f"cannot read chat_template {path}: {exc.strerror} (built-in templates: {names})"
            ) from exc
    try:
        compile_template(value)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"chat_template is not a valid Jinja2 template: {exc}") from exc
    return value


def _arguments(text: Any) -> Any:
    """Tool-call arguments as an object (templates `tojson` them); kept as text if not JSON,
    or if nested deeper than any request body may be (rendering recurses per level)."""
    if not isinstance(text, str):
        return text
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


def template_messages(
    messages: list[Message], *, merge_system: bool = True, media_marker: str | None = None
) -> list[Json]:
    """Messages in llama.cpp's shape (`common_chat_msg::to_json_oaicompat`), arguments as
    objects; leading system and developer turns become one system turn. With `media_marker`,
    images are that marker in the text (a model with a projector), else left out."""
    out: list[Json] = []
    tool_names: dict[str, str] = {}
    for message in messages:
        role = "system" if message.role == "developer" and merge_system else message.role
        if role == "system" and merge_system and len(out) == 1 and out[0]["role"] == "system":
            out[0]["content"] += "\n\n" + _content(message, media_marker)
            continue
        entry: Json = {"role": role, "content": _content(message, media_marker)}
        if message.reasoning:
            entry["reasoning_content"] = message.reasoning
        if role == "tool":
            name = message.name or tool_names.get(message.tool_call_id or "")
            if name:
                entry["name"] = name
            if message.tool_call_id:
                entry["tool_call_id"] = message.tool_call_id
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments(call.arguments)},
                    **({"id": call.id} if call.id else {}),
                }
                for call in message.tool_calls
            ]
            tool_names.update((call.id, call.name) for call in message.tool_calls)
        out.append(entry)
    return out


def template_tools(tools: list[ToolSpec]) -> list[Json]:
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


def _as_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _fit(messages: list[Json], caps: TemplateCaps) -> list[Json]:
    """llama.cpp's workarounds (chat.cpp): a system prompt the template ignores goes in front of
    the first user turn; arguments stay JSON text for a template that prints them as they come;
    content becomes typed parts for a template that only reads those."""
    if not caps.system_role and messages and messages[0]["role"] == "system":
        system, *messages = messages
        if messages:
            messages[0] = {**messages[0], "content": system["content"] + "\n" + messages[0]["content"]}
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            shape = _arguments if caps.object_arguments else _as_text
            message["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": shape(c["function"]["arguments"])}}
                for c in message["tool_calls"]
            ]
        if not caps.string_content and isinstance(message.get("content"), str):
            message["content"] = [{"type": "text", "text": message["content"]}]
        out.append(message)
    return out


def render_messages(
    source: str,
    messages: list[Json],
    tools: list[Json],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    extra: Json | None = None,
) -> str:
    """Render llama.cpp-shaped messages; what the template refuses is a 400 naming why."""
    caps = template_caps(source)
    if not writes_channels(source):
        messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in messages]
    messages = adjust(source, _fit(messages, caps), caps)
    # A template that renders no tool calls: where it never mentions tools (or refuses the
    # turns below), calls and results reach it as plain text rather than not at all.
    plain = not caps.tool_calls and any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    if plain and "tool" not in source:
        messages, plain = without_tool_turns(messages), False
    elif plain:
        messages = calls_as_text(messages)
    now = datetime.now()
    variables: Json = {
        "messages": messages,
        "bos_token": bos_token,
        "eos_token": eos_token,
        "datetime": now.strftime("%b %d %Y"),
        "date_string": now.strftime("%d %b %Y"),
    }
    if tools:
        variables["tools"] = tools
    if add_generation_prompt:
        variables["add_generation_prompt"] = True
    variables.update(extra or {})
    try:
        try:
            return compile_template(patched_source(source)).render(**variables)
        except TemplateRaised:
            if not plain:
                raise
            variables["messages"] = without_tool_turns(messages)
            return compile_template(patched_source(source)).render(**variables)
    except TemplateRaised as exc:
        raise invalid(
            f"The model's chat template rejected the conversation: {exc}", code="template_error"
        ) from exc
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
        raise invalid(
            f"The model's chat template cannot render this conversation: {type(exc).__name__}: {exc}",
            code="template_error",
        ) from exc
    except RecursionError as exc:
        raise invalid(
            "The conversation is nested too deeply for the chat template.", code="template_error"
        ) from exc


def render_chat(
    source: str,
    messages: list[Message],
    tools: list[ToolSpec],
    *,
    bos_token: str,
    eos_token: str,
    enable_thinking: bool | None = None,
    reasoning_effort: str | None = None,
    media_marker: str | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text, ending with the assistant's generation prompt.

    `enable_thinking` and `reasoning_effort` reach the template only when the request set them,
    so a request that sets neither gets the template's own defaults."""
    extra: Json = {}
    if enable_thinking is not None:
        extra["enable_thinking"] = enable_thinking
    if reasoning_effort:
        extra["reasoning_effort"] = extra["reasoning_strength"] = reasoning_effort
    return render_messages(
        source,
        template_messages(messages, merge_system=not writes_channels(source), media_marker=media_marker),
        template_tools(tools),
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        extra=extra,
    )


def continued_text(last: Message) -> str:
    """The continued message's text: its text parts joined by a blank line, as llama.cpp's
    `common_chat_msg::render_content` joins them for a continuation."""
    if isinstance(last.content, str):
        return last.content
    return "\n\n".join(part.text for part in last.content if part.type == "text")


def continuation(
    prompt: str, generation_prompt: str, last: Message, reasoning: ReasoningStyle | None, *, harmony: bool
) -> str:
    """`prompt` (the turns before `last`, with the generation prompt) continued with the
    assistant message `last`, left open: its reasoning, then its text (as llama.cpp's
    `continue_final_message` writes it: text parts joined by a blank line). Reasoning alone
    stays open for the model to go on."""
    thought, text = last.reasoning or "", continued_text(last)
    only_thought = bool(thought) and not text
    if harmony:  # the final channel, after an analysis block when there is reasoning
        if thought:
            prompt += f"<|channel|>analysis<|message|>{thought}"
            if only_thought:
                return prompt
            prompt += "<|end|><|start|>assistant"
        return prompt + "<|channel|>final<|message|>" + text
    if reasoning is None:
        return prompt + text
    at = generation_prompt.rfind(reasoning.open_tag)
    opens = at != -1 and reasoning.close_tag not in generation_prompt[at:]
    if not (thought or opens):
        return prompt + text  # nothing open, no reasoning to write
    if at != -1:  # the generation prompt's own block (open, or empty and closed) gives way
        prompt = prompt[: len(prompt) - len(generation_prompt) + at]
    prompt += reasoning.open_tag + thought
    return prompt if only_thought else prompt + reasoning.close_tag + text


def render_request(
    source: str,
    request: ChatRequest,
    messages: list[Message] | None = None,
    *,
    bos_token: str,
    eos_token: str,
    add_bos: bool = False,
    media_marker: str | None = None,
    reasoning: ReasoningStyle | None = None,
    thinking: bool | None = None,
    generation_prompt: bool = True,
) -> str:
    """The prompt text for a request: its messages (or `messages`, a fitted subset), its tools
    unless `tool_choice` is "none", its reasoning effort as the template's thinking switch
    (`thinking` when it sets none: the model's default; None leaves the template's own).
    With `continue_final`, a last assistant message is continued, not closed (`reasoning`: the
    model's reasoning tags, where its reasoning goes)."""
    effort = request.reasoning_effort
    switch = "enable_thinking" in source
    if effort is None:
        thinking_on = thinking if switch else None
    else:
        thinking_on = effort not in ("off", "none") if switch else None
    messages = request.messages if messages is None else messages

    def render(turns: list[Message], add_generation_prompt: bool = True) -> str:
        return render_chat(
            source,
            turns,
            request.tools if request.tool_choice != "none" else [],
            bos_token=bos_token,
            eos_token=eos_token,
            enable_thinking=thinking_on,
            reasoning_effort=effort if effort in EFFORT_LEVELS else None,
            media_marker=media_marker,
            add_generation_prompt=add_generation_prompt,
        )

    if request.continue_final and messages and messages[-1].role == "assistant":
        # The turns before it, with the generation prompt (the part a second rendering without
        # it does not have), then the message itself, left open.
        *head, last = messages
        prompt, bare = render(head), render(head, add_generation_prompt=False)
        opener = prompt[len(bare) :] if prompt.startswith(bare) else ""  # the generation prompt
        prompt = continuation(prompt, opener, last, reasoning, harmony=writes_channels(source))
    else:
        prompt = render(messages, add_generation_prompt=generation_prompt)
    # The tokenizer adds the BOS token itself: one the template wrote would be a second
    # (llama.cpp's common_chat_template_direct_apply drops it the same way).
    if add_bos and bos_token and prompt.startswith(bos_token):
        prompt = prompt[len(bos_token) :]
    return prompt
