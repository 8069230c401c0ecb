"""Anthropic Messages request parsing: the wire body → `ChatRequest` plus stream options.

Lenient where Anthropic's schema allows something we cannot use (cache_control,
context_management, defer_loading, metadata, server tools, unknown betas): accepted and
ignored, because a client like Claude Code cannot recover from a 400 on a field it always
sends. Strict, with the parameter named, where the body is malformed.

Conversions: a role-`system` message (Claude Code sends one) joins the system prompt; a user
message's `tool_result` blocks become `tool` messages ahead of its other content; thinking
blocks sent back are kept as the assistant's reasoning when their signature is ours or when
they carry none (a client that talked to llama-server, or built the history itself), not when
it is another server's or no longer matches the text; the per-session
`x-anthropic-billing-header` system block is dropped, so the prompt's prefix stays the same
from one session to the next and a KV cache can be reused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams, ToolCall, ToolSpec
from sluicegate.core.validation import Fields

log = logging.getLogger(__name__)

BILLING_HEADER_PREFIX = "x-anthropic-billing-header"
ROLES = ("user", "assistant", "system")
THINKING_TYPES = ("enabled", "disabled", "adaptive")
# Content block types of Anthropic's schema this dialect reads; other schema types are skipped.
KNOWN_SKIPPED_BLOCKS = frozenset(
    {
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
        "search_result",
        "compaction",
    }
)
# Anthropic's effort levels → the reasoning effort engines take.
EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "high", "xhigh": "high"}


class SignatureCheck(Protocol):
    def verify(self, thinking: str, signature: str) -> str | None:
        """The thinking text a signature vouches for, or None when it is not ours."""


@dataclass(slots=True)
class MessagesOptions:
    stream: bool = False
    # `thinking.display: "omitted"`: thinking blocks carry a signature but no text.
    omit_thinking: bool = False
    betas: tuple[str, ...] = ()
    skipped_tools: list[str] = field(default_factory=list)  # server tools we cannot run


def parse_messages_request(
    body: Any, signatures: SignatureCheck, *, betas: str | None = None, counting: bool = False
) -> tuple[ChatRequest, MessagesOptions]:
    """`betas` is the `anthropic-beta` header: recorded, never refused. `counting`: a
    `count_tokens` body, which has no `max_tokens`."""
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    max_tokens = f.integer("max_tokens", low=1)
    if max_tokens is None and not counting:
        f.fail("max_tokens", "max_tokens: Field required", "missing_required_parameter")
    raw_messages = f.array("messages", required=True, non_empty=True)
    assert raw_messages is not None

    system = _system(f)
    messages: list[Message] = []
    for m in f.items("messages", raw_messages):
        role = m.string("role", required=True, choices=ROLES)
        if role == "system":
            system.extend(_texts(m, "content"))
        elif role == "user":
            messages.extend(_user_message(m))
        else:
            messages.append(_assistant_message(m, signatures))
    if system:
        messages.insert(0, Message(role="system", content="\n\n".join(system)))

    options = MessagesOptions(stream=bool(f.boolean("stream")))
    options.betas = tuple(b.strip() for b in (betas or "").split(",") if b.strip())
    request = ChatRequest(model=model, messages=messages)
    request.sampling = _sampling(f, max_tokens)
    request.tools = _tools(f, options)
    request.tool_choice, request.parallel_tool_calls = _tool_choice(f, request.tools)
    request.reasoning_effort, options.omit_thinking = _reasoning(f)
    request.response_format = _output_format(f)
    request.continue_final = _prefilled(f, messages)
    metadata = f.object("metadata")
    if metadata is not None:
        metadata.string("user_id")
    f.object("context_management")  # clearing old thinking: our templates drop it already
    return request, options


def _prefilled(f: Fields, messages: list[Message]) -> bool:
    """A last assistant message is the start of the reply, which continues it (prefill)."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or last.tool_calls:
        return False
    if last.text != last.text.rstrip():
        f.fail("messages", "messages: final assistant content cannot end with trailing whitespace")
    return True


def clamp_max_tokens(request: ChatRequest, context_length: int | None) -> None:
    """Claude Code asks for 32000 (128000 for claude-* names) whatever the model: a smaller
    context clamps the budget instead of refusing the request."""
    limit = request.sampling.max_tokens
    if context_length and limit is not None and limit > context_length:
        request.sampling.max_tokens = context_length


# --- system and messages --------------------------------------------------------------------


def _system(f: Fields) -> list[str]:
    value = f.obj.get("system")
    if value is None:
        return []
    return [text for text in _texts(f, "system") if not text.startswith(BILLING_HEADER_PREFIX)]


def _texts(f: Fields, key: str) -> list[str]:
    """A string, or an array of text blocks (system prompts, role-system messages)."""
    value = f.obj.get(key)
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list):
        f.fail(key, f"{f.where(key)}: Input should be a valid string or a list of text blocks")
    out: list[str] = []
    for block in f.items(key, value):
        block.string("type", required=True, choices=("text",))
        text = block.string("text", required=True) or ""
        if text:
            out.append(text)
    return out


def _blocks(m: Fields) -> list[Fields]:
    """A message's content as blocks; a plain string is one text block."""
    value = m.obj.get("content")
    if isinstance(value, str):
        return [Fields({"type": "text", "text": value}, m.where("content"))]
    if not isinstance(value, list):
        if value is None:
            m.fail("content", f"{m.where('content')}: Field required", "missing_required_parameter")
        m.fail("content", f"{m.where('content')}: Input should be a valid string or a list of content blocks")
    return m.items("content", value)


def _user_message(m: Fields) -> list[Message]:
    results: list[Message] = []
    parts: list[ContentPart] = []
    for block in _blocks(m):
        kind = block.string("type", required=True)
        if kind == "tool_result":
            results.append(_tool_result(block))
        elif kind in ("text", "image", "document"):
            parts.extend(_content_part(block, kind))
        elif kind in ("tool_use", "thinking"):
            block.fail(
                "type", f"{block.where('type')}: '{kind}' blocks may only appear in assistant messages"
            )
        else:
            _unknown_block(block, kind)
    out = results
    if parts or not results:
        out.append(Message(role="user", content=_simplify(parts)))
    return out


def _assistant_message(m: Fields, signatures: SignatureCheck) -> Message:
    message = Message(role="assistant")
    parts: list[ContentPart] = []
    reasoning: list[str] = []
    for block in _blocks(m):
        kind = block.string("type", required=True)
        if kind == "text":
            parts.append(ContentPart("text", text=block.string("text", required=True) or ""))
        elif kind == "tool_use":
            call_id = block.string("id", required=True) or ""
            name = block.string("name", required=True) or ""
            arguments = block.obj.get("input", {})
            if not isinstance(arguments, dict):
                block.fail("input", f"{block.where('input')}: Input should be a valid dictionary")
            message.tool_calls.append(ToolCall(call_id, name, orjson.dumps(arguments).decode()))
        elif kind == "thinking":
            thinking = block.string("thinking") or ""
            signature = block.string("signature") or ""
            # Unsigned (llama-server's own replies carry `signature: ""`): the client's text
            # as it sends it. A foreign or tampered signature: the thinking is not replayed.
            verified = signatures.verify(thinking, signature) if signature else thinking
            if verified:
                reasoning.append(verified)
        elif kind in ("image", "document", "tool_result"):
            block.fail("type", f"{block.where('type')}: '{kind}' blocks may only appear in user messages")
        else:
            _unknown_block(block, kind)
    message.content = "".join(part.text for part in parts)
    message.reasoning = "\n".join(reasoning) or None
    return message


def _unknown_block(block: Fields, kind: str | None) -> None:
    if kind in KNOWN_SKIPPED_BLOCKS:
        return  # part of Anthropic's schema, nothing a local model can use
    block.fail("type", f"{block.where('type')}: unknown content block type '{kind}'")


def _content_part(block: Fields, kind: str) -> list[ContentPart]:
    if kind == "text":
        return [ContentPart("text", text=block.string("text", required=True) or "")]
    source = block.object("source", required=True)
    assert source is not None
    source_type = source.string("type", required=True)
    if kind == "image":
        if source_type == "base64":
            media = source.string("media_type", required=True)
            data = source.string("data", required=True)
            return [ContentPart("image", image_url=f"data:{media};base64,{data}")]
        if source_type == "url":
            return [ContentPart("image", image_url=source.string("url", required=True) or "")]
        source.fail(
            "type", f"{source.where('type')}: image sources of type '{source_type}' are not supported here"
        )
    # documents: plain-text ones are read as text; PDFs and files need what we do not have
    if source_type == "text":
        text = source.string("data", required=True) or ""
        title = block.string("title")
        return [ContentPart("text", text=f"{title}\n\n{text}" if title else text)]
    if source_type == "content":
        return [ContentPart("text", text="\n".join(_texts(source, "content")))]
    source.fail("type", f"{source.where('type')}: documents of type '{source_type}' are not supported here")


def _tool_result(block: Fields) -> Message:
    """A `tool_result` → a `tool` message: its text, and its images as image parts where they
    stand (a vision model sees them, as it sees a user's; a model without vision refuses them
    as it refuses any image)."""
    call_id = block.string("tool_use_id", required=True)
    value = block.obj.get("content")
    parts: list[ContentPart] = []
    if isinstance(value, str):
        parts.append(ContentPart("text", text=value))
    elif isinstance(value, list):
        for part in block.items("content", value):
            kind = part.string("type", required=True)
            if kind in ("text", "image", "document"):
                parts.extend(_content_part(part, kind))
            else:
                _unknown_block(part, kind)
    elif value is not None:
        block.fail("content", f"{block.where('content')}: Input should be a valid string or a list of blocks")
    if block.boolean("is_error"):
        if parts and parts[0].type == "text":
            parts[0].text = f"Error: {parts[0].text}" if parts[0].text else "Error"
        else:
            parts.insert(0, ContentPart("text", text="Error"))
    content: str | list[ContentPart] = parts
    if all(part.type == "text" for part in parts):  # text alone: one string, a block a line
        content = "\n".join(part.text for part in parts)
    return Message(role="tool", content=content, tool_call_id=call_id)


def _simplify(parts: list[ContentPart]) -> str | list[ContentPart]:
    """Text-only content as one string, as templates expect."""
    if all(part.type == "text" for part in parts):
        return (
            "\n\n".join(part.text for part in parts) if len(parts) > 1 else (parts[0].text if parts else "")
        )
    return parts


# --- parameters -----------------------------------------------------------------------------


def _sampling(f: Fields, max_tokens: int | None) -> SamplingParams:
    s = SamplingParams(max_tokens=max_tokens)
    s.temperature = f.number("temperature", low=0, high=1)
    s.top_p = f.number("top_p", low=0, high=1)
    s.top_k = f.integer("top_k", low=0) or None
    stops = f.array("stop_sequences") or []
    if not all(isinstance(stop, str) for stop in stops):
        f.fail("stop_sequences", "stop_sequences: Input should be a list of strings")
    s.stop = [stop for stop in stops if stop]
    return s


def _tools(f: Fields, options: MessagesOptions) -> list[ToolSpec]:
    raw = f.array("tools") or []
    tools: list[ToolSpec] = []
    for t in f.items("tools", raw):
        kind = t.string("type")
        name = t.string("name", required=True) or ""
        if kind not in (None, "custom"):
            # Anthropic's server tools (web_search_…, code_execution_…): nothing here runs them.
            options.skipped_tools.append(name)
            log.info("anthropic: tool %r of type %r is not offered to the model", name, kind)
            continue
        schema = t.object("input_schema", required=True)
        assert schema is not None
        parameters = {k: v for k, v in schema.obj.items() if k != "$schema"}
        tools.append(
            ToolSpec(
                name=name,
                description=t.string("description") or "",
                parameters=parameters,
                strict=bool(t.boolean("strict")),
            )
        )
    return tools


def _tool_choice(f: Fields, tools: list[ToolSpec]) -> tuple[str, bool]:
    choice = f.object("tool_choice")
    if choice is None:
        return "auto", True
    kind = choice.string("type", required=True, choices=("auto", "any", "tool", "none"))
    parallel = not choice.boolean("disable_parallel_tool_use")
    if kind == "tool":
        name = choice.string("name", required=True) or ""
        if name not in {tool.name for tool in tools}:
            choice.fail("name", f"{choice.where('name')}: no tool named '{name}' is in 'tools'")
        return name, parallel
    if kind == "any":
        if not tools:
            choice.fail("type", "tool_choice.type 'any' needs at least one tool in 'tools'")
        return "required", parallel
    return kind or "auto", parallel


def _reasoning(f: Fields) -> tuple[str | None, bool]:
    """`thinking` and `output_config.effort` → the engine's reasoning effort, and whether the
    thinking text is to be omitted from the answer."""
    effort: str | None = None
    config = f.object("output_config")
    if config is not None:
        level = config.string("effort")
        if level is not None:
            effort = EFFORT.get(level, level)
    thinking = f.object("thinking")
    if thinking is None:
        return effort, False
    kind = thinking.string("type", required=True, choices=THINKING_TYPES)
    display = thinking.string("display")
    omit = display == "omitted"
    if kind == "disabled":
        return "none", False
    if kind == "enabled":
        budget = thinking.integer("budget_tokens", low=1)
        if effort is None:
            effort = "low" if budget is not None and budget < 4096 else "medium"
            if budget is not None and budget >= 16384:
                effort = "high"
    return effort or "medium", omit


def _output_format(f: Fields) -> dict[str, Any] | None:
    config = f.object("output_config")
    fmt = config.object("format") if config is not None else None
    if fmt is None:
        fmt = f.object("output_format")  # the structured-outputs beta's older spelling
    if fmt is None:
        return None
    fmt.string("type", required=True, choices=("json_schema",))
    schema = fmt.object("schema", required=True)
    assert schema is not None
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema.obj, "strict": True}}
