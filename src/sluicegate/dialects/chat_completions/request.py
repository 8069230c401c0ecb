"""Chat Completions request parsing: the wire body → `ChatRequest` plus stream options.

Validation follows OpenAI's wording and always names the parameter. Parameters that are part
of the API are parsed; extension parameters that local servers accept (top_k, min_p,
repeat_penalty, ttl, ...) are passed through; anything else is ignored, as vLLM and
llama-server do, so clients sending provider-specific extras keep working.
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import invalid
from sluicegate.core.request import (
    ChatRequest,
    ContentPart,
    Message,
    RequestOptions,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from sluicegate.core.validation import INT32_MAX, Fields, logit_bias, sampling_fields, stream_fields

ROLES = ("system", "developer", "user", "assistant", "tool")
# Accepted and passed through in `ChatRequest.extra` to an upstream that understands them.
# llama-server's `lora` (per-request adapter scales) and `id_slot` too: core/slots.py.
EXTENSION_PARAMS = ("chat_template_kwargs", "cache_prompt", "lora", "id_slot")
OVERFLOW_POLICIES = ("error", "rolling_window", "truncate_middle")


class ChatOptions:
    """What the encoder needs of the request besides the `ChatRequest`. A plain class, not a
    dataclass: compiled, a dataclass is made by the interpreted `__init__` that `dataclasses`
    writes (an args tuple, a kwargs dict, a frame: ~2.5 k instructions a request); this one's
    is native."""

    __slots__ = ("include_usage", "return_progress", "stream", "verbose")

    def __init__(
        self, stream: bool, include_usage: bool, return_progress: bool = False, verbose: bool = False
    ) -> None:
        self.stream = stream
        self.include_usage = include_usage
        self.return_progress = (
            return_progress  # llama-server's `prompt_progress` chunks while the prompt is read
        )
        self.verbose = verbose  # llama-server's: `__verbose` (the rendered prompt) in the answer


def parse_chat_request(
    body: Any, *, prefill_assistant: bool = False, verbose: bool = False
) -> tuple[ChatRequest, ChatOptions]:
    """`prefill_assistant`: a last assistant message is continued unless the request says
    otherwise (`[chat_completions] prefill_assistant`, llama-server's default); `verbose`: the
    answer gets `__verbose` unless the request says `verbose: false` (llama-server's `--verbose`)."""
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    raw_messages = f.array("messages", required=True, non_empty=True)
    assert raw_messages is not None
    messages = [_message(m) for m in f.items("messages", raw_messages)]

    stream, include_usage = stream_fields(f)

    # Each value read in the order the checks have always run (the first error a body has is
    # the one reported), and the request built once from them: a `ChatRequest()` with its
    # defaults (a whole `SamplingParams` among them) set again field by field cost as much as
    # the rest of the parse.
    sampling = _sampling(f)
    raw_tools = f.array("tools")
    tools = [_tool(t) for t in f.items("tools", raw_tools or [])]
    tool_choice = _tool_choice(f, tools)
    parallel_tool_calls = f.boolean("parallel_tool_calls") is not False
    reasoning_effort = f.string("reasoning_effort")
    response_format = _response_format(f)
    _refuse_unservable(f)
    prediction = _prediction(f)
    continue_final = _continues(f, messages, prefill_assistant)
    f.object("chat_template_kwargs")  # forwarded as they are, but an object (what templates take)
    f.boolean("cache_prompt")
    extra = {key: body[key] for key in EXTENSION_PARAMS if key in body}
    options = RequestOptions(
        # LM Studio's `ttl`: idle seconds before the model instance this request uses is unloaded.
        ttl=f.number("ttl", low=1, high=INT32_MAX),
        # What a model that cannot fit the prompt does (engines with a policy: llamacpp).
        context_overflow=f.string("context_overflow", choices=OVERFLOW_POLICIES),
    )
    request = ChatRequest(
        model=model,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        sampling=sampling,
        reasoning_effort=reasoning_effort,
        response_format=response_format,
        continue_final=continue_final,
        options=options,
        extra=extra,
        prediction=prediction,
    )
    progress = bool(f.boolean("return_progress"))
    asked = f.boolean("verbose")
    shown = verbose if asked is None else asked
    return request, ChatOptions(stream, include_usage, return_progress=progress, verbose=shown)


def _sampling(f: Fields) -> SamplingParams:
    s = sampling_fields(f)
    s.max_tokens = f.integer("max_completion_tokens", low=1, high=INT32_MAX)
    if s.max_tokens is None:
        s.max_tokens = f.integer("max_tokens", low=1, high=INT32_MAX)
    s.n = f.integer("n", low=1, high=128) or 1
    s.logprobs = bool(f.boolean("logprobs"))
    s.top_logprobs = f.integer("top_logprobs", low=0, high=20)
    if s.top_logprobs and not s.logprobs:
        f.fail(
            "top_logprobs",
            "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
        )
    s.stop = f.stop()
    s.logit_bias, s.logit_bias_text = logit_bias(f)
    return s


def _continues(f: Fields, messages: list[Message], prefill: bool = False) -> bool:
    """llama-server's and vLLM's `continue_final_message` (vLLM's companion,
    `add_generation_prompt: false`, says the same of a last assistant message): the reply
    continues the last message, an assistant's without tool calls, instead of a new one."""
    cont = f.boolean("continue_final_message")
    prompt = f.boolean("add_generation_prompt")
    if cont and prompt:
        f.fail(
            "continue_final_message",
            "Cannot set both add_generation_prompt and continue_final_message to true.",
        )
    last = messages[-1]
    if cont is None and prompt is None:  # neither said: the server's default
        return prefill and last.role == "assistant" and not last.tool_calls
    if not cont and prompt is not False:
        return False
    key = "continue_final_message" if cont else "add_generation_prompt"
    if last.role != "assistant":
        f.fail(
            key, f"'{key}' continues the last message, which must be an assistant message, not {last.role!r}."
        )
    if last.tool_calls:
        f.fail(key, "Cannot continue an assistant message that contains tool calls.")
    return True


def _response_format(f: Fields) -> dict[str, Any] | None:
    """`response_format`, or llama-server's extensions saying the same: a GBNF `grammar`, a
    top-level `json_schema`, and a `schema` inside `json_object` (the JSON must match it).
    Two of them at once is a 400: which one wins would be a guess."""
    response_format = f.object("response_format")
    given = ["response_format"] if response_format is not None else []
    fmt: dict[str, Any] | None = None
    if response_format is not None:
        kind = response_format.string("type", required=True, choices=("text", "json_object", "json_schema"))
        fmt = response_format.obj
        if kind == "json_object" and "schema" in fmt:
            fmt = {"type": "json_schema", "json_schema": {"name": "response", "schema": fmt["schema"]}}
    if (grammar := f.string("grammar")) is not None:
        given.append("grammar")
        fmt = {"type": "grammar", "grammar": grammar}
    if (schema := f.object("json_schema")) is not None:
        given.append("json_schema")
        fmt = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema.obj}}
    if len(given) > 1:
        f.fail(
            given[1], f"Send one of 'response_format', 'grammar' or 'json_schema', not {' and '.join(given)}."
        )
    return fmt


def _refuse_unservable(f: Fields) -> None:
    """Parameters of the API that no engine here can honour: a clear 400, never silence."""
    modalities = f.array("modalities")
    if modalities and any(m != "text" for m in modalities):
        f.fail("modalities", "Only the 'text' modality is supported.")
    for key in ("audio", "web_search_options", "functions"):
        if f.obj.get(key) is not None:
            hint = " Use 'tools' instead." if key == "functions" else ""
            f.fail(key, f"'{key}' is not supported by Sluicegate.{hint}")


def _prediction(f: Fields) -> str | None:
    """OpenAI's Predicted Outputs: `{"type": "content", "content": text or text parts}`, the
    text most of the answer is expected to repeat (an engine may draft from it; the output is
    the model's own either way)."""
    prediction = f.object("prediction")
    if prediction is None:
        return None
    prediction.string("type", required=True, choices=("content",))
    content = prediction.obj.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        prediction.fail(
            "content",
            f"Invalid type for '{prediction.where('content')}': expected a string or an array of text parts.",
        )
    texts = []
    for part in prediction.items("content", content):
        part.string("type", required=True, choices=("text",))
        texts.append(part.string("text", required=True) or "")
    return "".join(texts)


def _content(f: Fields, key: str, role: str) -> str | list[ContentPart]:
    value = f.obj.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        f.fail(
            key,
            f"Invalid type for '{f.where(key)}': expected a string or an array of content parts.",
        )
    parts: list[ContentPart] = []
    for part in f.items(key, value):
        kind = part.string("type", required=True)
        if kind == "text":
            parts.append(ContentPart("text", text=part.string("text", required=True) or ""))
        elif kind == "image_url" and role == "user":
            image = part.obj.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                part.fail(
                    "image_url",
                    f"Invalid '{part.where('image_url')}': expected an object with a string 'url'.",
                )
            parts.append(ContentPart("image", image_url=url))
        elif kind == "input_audio" and role == "user":
            audio = part.object("input_audio", required=True)
            assert audio is not None
            parts.append(
                ContentPart(
                    "audio",
                    audio_data=audio.string("data", required=True) or "",
                    audio_format=audio.string("format", required=True) or "",
                )
            )
        elif kind == "refusal" and role == "assistant":
            parts.append(ContentPart("text", text=part.string("refusal", required=True) or ""))
        else:
            part.fail(
                "type",
                f"Invalid value for '{part.where('type')}': '{kind}' content parts are not supported in '{role}' messages.",
            )
    return parts


def _message(m: Fields) -> Message:
    role = m.string("role", required=True, choices=ROLES)
    assert role is not None
    if role != "assistant" and m.obj.get("content") is None:
        m.fail(
            "content", f"Missing required parameter: '{m.where('content')}'.", "missing_required_parameter"
        )
    message = Message(role=role, content=_content(m, "content", role))  # type: ignore[arg-type]
    message.name = m.string("name")
    if role == "tool":
        message.tool_call_id = m.string("tool_call_id", required=True)
    if role == "assistant":
        calls = m.array("tool_calls") or []
        for call in m.items("tool_calls", calls):
            fn = call.object("function", required=True)
            assert fn is not None
            arguments = fn.string("arguments") or ""
            message.tool_calls.append(
                ToolCall(
                    call.string("id", required=True) or "",
                    fn.string("name", required=True) or "",
                    arguments,
                )
            )
        message.reasoning = m.string("reasoning_content") or m.string("reasoning")
        if m.obj.get("content") is None and not calls and m.obj.get("refusal") is None:
            m.fail(
                "content",
                f"Missing required parameter: '{m.where('content')}' (or 'tool_calls').",
                "missing_required_parameter",
            )
        refusal = m.string("refusal")
        if refusal and not message.text:
            message.content = refusal
    return message


def _tool(t: Fields) -> ToolSpec:
    t.string("type", required=True, choices=("function",))
    fn = t.object("function", required=True)
    assert fn is not None
    name = fn.string("name", required=True) or ""
    parameters = fn.object("parameters")
    return ToolSpec(
        name=name,
        description=fn.string("description") or "",
        parameters=parameters.obj if parameters is not None else {},
        strict=bool(fn.boolean("strict")),
    )


def _tool_choice(f: Fields, tools: list[ToolSpec]) -> str:
    choice = f.obj.get("tool_choice")
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        f.string("tool_choice", choices=("none", "auto", "required"))
        if choice == "required" and not tools:
            f.fail(
                "tool_choice",
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            )
        return choice
    c = f.object("tool_choice")
    assert c is not None
    c.string("type", required=True, choices=("function",))
    fn = c.object("function", required=True)
    assert fn is not None
    name = fn.string("name", required=True) or ""
    if name not in {tool.name for tool in tools}:
        fn.fail("name", f"Invalid value for '{fn.where('name')}': no tool named '{name}' is in 'tools'.")
    if name in ("auto", "none", "required"):
        raise invalid(f"A tool may not be named '{name}'.", "tool_choice")
    return name
