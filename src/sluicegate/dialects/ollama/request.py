"""Ollama request parsing: `/api/chat` and `/api/generate` bodies → `ChatRequest`.

What Ollama's `docs/api.md` gives and the `ollama` client libraries send: `messages` (roles
system/user/assistant/tool; `images` as base64; `tool_calls` with object `arguments`; tool
results as `role: "tool"` with `tool_name`), `tools`, `think` (a boolean or low/medium/high),
`format` ("json" or a JSON schema), `options` (the sampling and context settings; unknown ones
are ignored, as Ollama does), `keep_alive` (a duration string or seconds), `stream` (default
true). `/api/generate` is a one-turn chat: `system` and `prompt` through the model's template.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sluicegate.core.ids import new_id
from sluicegate.core.request import (
    ChatRequest,
    ContentPart,
    Message,
    RawPrompt,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from sluicegate.core.validation import INT32_MAX, Fields, sampling_fields

ROLES = ("system", "user", "assistant", "tool")
THINK_LEVELS = ("low", "medium", "high")
# A keep_alive this long or longer (or negative: "forever") keeps the model loaded for good.
FOREVER = float(INT32_MAX)
_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(slots=True)
class OllamaOptions:
    """What the encoder and the load/unload shortcut need besides the `ChatRequest`."""

    endpoint: str  # "chat" or "generate"
    name: str  # the model name as the client sent it (`name:tag`): what the answer echoes
    stream: bool
    keep_alive: float | None  # seconds; 0 unloads; None: the server's default
    think: bool | str | None
    raw: bool = False
    suffix: str | None = None
    empty: bool = False  # no messages / no prompt: a load (or, with keep_alive 0, an unload)


def keep_alive_seconds(f: Fields) -> float | None:
    """`keep_alive` as seconds: a number of seconds, or a Go duration string ("5m", "1h30m",
    "0"); negative means forever."""
    value = f.obj.get("keep_alive")
    if value is None:
        return None
    if isinstance(value, bool):
        f.fail(
            "keep_alive", "Invalid 'keep_alive': expected a duration such as \"5m\" or a number of seconds."
        )
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text.replace("+", ""):
                f.fail(
                    "keep_alive",
                    f'Invalid \'keep_alive\': {value[:40]!r} is not a duration (e.g. "5m", "1h").',
                )
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        f.fail(
            "keep_alive", "Invalid 'keep_alive': expected a duration such as \"5m\" or a number of seconds."
        )
    if seconds != seconds:  # NaN
        f.fail("keep_alive", "Invalid 'keep_alive': expected a number.")
    if seconds < 0 or seconds >= FOREVER:
        return FOREVER
    return seconds


def _sampling(options: Fields | None) -> tuple[SamplingParams, int | None]:
    """Ollama `options` → sampling, and `num_ctx`; unknown options are ignored (Ollama does)."""
    if options is None:
        return SamplingParams(), None
    s = sampling_fields(options)
    predict = options.integer("num_predict", low=-2, high=INT32_MAX)
    s.max_tokens = predict if predict is not None and predict > 0 else None  # -1/-2: no limit
    stop = options.obj.get("stop")
    if isinstance(stop, str):
        s.stop = [stop]
    elif isinstance(stop, list) and all(isinstance(x, str) for x in stop):
        s.stop = list(stop)
    elif stop is not None:
        options.fail("stop", "Invalid 'options.stop': expected an array of strings.")
    num_ctx = options.integer("num_ctx", low=1, high=INT32_MAX)
    return s, num_ctx


def _think(f: Fields) -> bool | str | None:
    value = f.obj.get("think")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value in THINK_LEVELS:
        return value
    f.fail("think", 'Invalid \'think\': expected true, false, "low", "medium" or "high".')


def reasoning_effort(think: bool | str | None) -> str | None:
    if think is None:
        return None
    if isinstance(think, bool):
        return "on" if think else "off"
    return think


def _format(f: Fields) -> dict[str, Any] | None:
    """`format`: "json" → any JSON object; a JSON schema → output matching it; "" → none."""
    value = f.obj.get("format")
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value, "strict": True}}
    f.fail("format", "Invalid 'format': expected \"json\" or a JSON schema object.")


def _images(m: Fields) -> list[ContentPart]:
    images = m.array("images") or []
    parts: list[ContentPart] = []
    for i, image in enumerate(images):
        if not isinstance(image, str) or not image:
            m.fail("images", f"Invalid '{m.where('images')}[{i}]': expected a base64-encoded image.")
        url = image if image.startswith("data:") else f"data:image/png;base64,{image}"
        parts.append(ContentPart("image", image_url=url))
    return parts


def _arguments(fn: Fields) -> str:
    value = fn.obj.get("arguments")
    if value is None:
        return "{}"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):  # some clients send OpenAI's JSON text; take it as it is
        return value
    fn.fail("arguments", f"Invalid type for '{fn.where('arguments')}': expected an object.")


def _content(text: str, images: list[ContentPart]) -> str | list[ContentPart]:
    if not images:
        return text
    return [*([ContentPart("text", text=text)] if text else []), *images]


def _messages(f: Fields) -> list[Message]:
    raw = f.array("messages") or []
    messages: list[Message] = []
    # Tool results name their tool, not a call: each answers the earliest unanswered call of
    # that name (Ollama's own templates pair them the same way), else gets an id of its own.
    unanswered: list[ToolCall] = []
    for m in f.items("messages", raw):
        role = m.string("role", required=True, choices=ROLES)
        content = m.obj.get("content")
        if content is not None and not isinstance(content, str):
            m.fail("content", f"Invalid type for '{m.where('content')}': expected a string.")
        text = content or ""
        message = Message(role=role, content=_content(text, _images(m) if role == "user" else []))  # type: ignore[arg-type]
        if role == "assistant":
            message.reasoning = m.string("thinking")
            for call in m.items("tool_calls", m.array("tool_calls") or []):
                fn = call.object("function", required=True)
                assert fn is not None
                name = fn.string("name", required=True) or ""
                call_id = call.string("id") or new_id("call_", 24)
                message.tool_calls.append(ToolCall(call_id, name, _arguments(fn)))
            unanswered = list(message.tool_calls)
        elif role == "tool":
            name = m.string("tool_name") or m.string("name") or ""
            answered = next((c for c in unanswered if c.name == name or not name), None)
            if answered is not None:
                unanswered.remove(answered)
            message.name = name or (answered.name if answered else None)
            message.tool_call_id = m.string("tool_call_id") or (
                answered.id if answered else new_id("call_", 24)
            )
        messages.append(message)
    return messages


def _tools(f: Fields) -> list[ToolSpec]:
    tools: list[ToolSpec] = []
    for t in f.items("tools", f.array("tools") or []):
        t.string("type", choices=("function",))
        fn = t.object("function", required=True)
        assert fn is not None
        parameters = fn.object("parameters")
        tools.append(
            ToolSpec(
                name=fn.string("name", required=True) or "",
                description=fn.string("description") or "",
                parameters=parameters.obj if parameters is not None else {},
            )
        )
    return tools


def _common(f: Fields, endpoint: str, messages: list[Message]) -> tuple[ChatRequest, OllamaOptions]:
    model = f.string("model", required=True) or ""
    if not model.strip():
        f.fail("model", "model is required")
    sampling, num_ctx = _sampling(f.object("options"))
    think = _think(f)
    chat = ChatRequest(model=model, messages=messages, sampling=sampling)
    chat.reasoning_effort = reasoning_effort(think)
    chat.response_format = _format(f)
    chat.options.context_length = num_ctx
    keep_alive = keep_alive_seconds(f)
    if keep_alive:
        chat.options.ttl = keep_alive
    stream = f.boolean("stream") is not False  # streaming is Ollama's default
    return chat, OllamaOptions(endpoint, model, stream, keep_alive, think)


def parse_chat(body: Any) -> tuple[ChatRequest, OllamaOptions]:
    f = Fields(body)
    messages = _messages(f)
    chat, options = _common(f, "chat", messages)
    chat.tools = _tools(f)
    options.empty = not messages
    # A last assistant message is continued, as Ollama's templates leave the last turn open.
    chat.continue_final = bool(messages) and messages[-1].role == "assistant" and not messages[-1].tool_calls
    return chat, options


def parse_generate(body: Any) -> tuple[ChatRequest, OllamaOptions]:
    """A prompt (and `system`) as one chat turn through the model's template, as Ollama does
    without `raw`; `images` go with the prompt. With `raw` the prompt goes to the model as it
    is (no template, no system); with a `suffix` it is fill-in-the-middle, laid out with the
    tokenizer's FIM tokens: both are the engine's raw-prompt path (`ChatRequest.prompt`).
    `context` (the old token context) is ignored."""
    f = Fields(body)
    prompt = f.string("prompt") or ""
    system = f.string("system")
    f.string("template")
    messages: list[Message] = []
    if system:
        messages.append(Message(role="system", content=system))
    images = _images(f)
    if prompt or images:
        messages.append(Message(role="user", content=_content(prompt, images)))
    chat, options = _common(f, "generate", messages)
    options.raw = bool(f.boolean("raw"))
    options.suffix = f.string("suffix") or None
    options.empty = not prompt and not images
    if options.raw or options.suffix is not None:
        chat.messages = []
        chat.prompt = RawPrompt(prompt, suffix=options.suffix)
    return chat, options
