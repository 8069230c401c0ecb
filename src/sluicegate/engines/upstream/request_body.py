"""ChatRequest → the streaming Chat Completions body an upstream receives.

Whatever dialect the client spoke, the upstream hears Chat Completions with `stream: true` and
usage requested. Only what the request set is sent, so an upstream's own defaults apply to the
rest. Parameters outside OpenAI's API (top_k, min_p, repetition_penalty) are sent only when the
client asked for them, under the names vLLM and SGLang use.
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams, ToolSpec


def _content(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [
        {"type": "text", "text": part.text}
        if part.type == "text"
        else {"type": "image_url", "image_url": {"url": part.image_url}}
        for part in content
    ]


def message_body(message: Message) -> dict[str, Any]:
    # Chat templates of open models rarely know `developer`; it means `system` to all of them.
    role = "system" if message.role == "developer" else message.role
    body: dict[str, Any] = {"role": role}
    if message.role == "assistant" and message.tool_calls:
        body["content"] = _content(message.content) if message.content else None
        body["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    else:
        body["content"] = _content(message.content)
    if message.role == "tool" and message.tool_call_id is not None:
        body["tool_call_id"] = message.tool_call_id
    if message.name:
        body["name"] = message.name
    return body


def tool_body(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def request_body(request: ChatRequest, upstream_model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": [message_body(m) for m in request.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [tool_body(t) for t in request.tools]
        choice = request.tool_choice
        body["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "function": {"name": choice}}
        )
        if not request.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    s = request.sampling
    add_sampling(body, s)
    fmt = request.response_format
    if fmt is not None and fmt.get("type") == "grammar":  # GBNF: llama-server's (and vLLM's) `grammar`
        body["grammar"], fmt = fmt.get("grammar"), None
    for key, value in (
        ("top_logprobs", s.top_logprobs),
        ("reasoning_effort", request.reasoning_effort),
        ("response_format", fmt),
    ):
        if value is not None:
            body[key] = value
    if s.logprobs:
        body["logprobs"] = True
    if request.prediction is not None:  # OpenAI's Predicted Outputs, for an upstream that drafts
        body["prediction"] = {"type": "content", "content": request.prediction}
    if request.continue_final:  # as vLLM and llama-server take it
        body["continue_final_message"], body["add_generation_prompt"] = True, False
    add_extra(body, request)
    return body


def add_sampling(body: dict[str, Any], s: SamplingParams) -> None:
    """The sampling settings the request set (the upstream's defaults apply to the rest)."""
    for key, value in (
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("top_k", s.top_k),
        ("min_p", s.min_p),
        ("typical_p", s.typical_p),
        ("repeat_last_n", s.repeat_last_n),
        ("repetition_penalty", s.repeat_penalty),
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
        ("seed", s.seed),
        ("max_tokens", s.max_tokens),
        # llama.cpp's further samplers: an upstream llama-server (or vLLM, for some) reads them
        ("dry_multiplier", s.dry_multiplier),
        ("dry_base", s.dry_base),
        ("dry_allowed_length", s.dry_allowed_length),
        ("dry_penalty_last_n", s.dry_penalty_last_n),
        ("dry_sequence_breakers", s.dry_sequence_breakers),
        ("xtc_probability", s.xtc_probability),
        ("xtc_threshold", s.xtc_threshold),
        ("top_n_sigma", s.top_n_sigma),
        ("mirostat", s.mirostat or None),
        ("mirostat_tau", s.mirostat_tau),
        ("mirostat_eta", s.mirostat_eta),
        ("ignore_eos", s.ignore_eos or None),
    ):
        if value is not None:
            body[key] = value
    if s.stop:
        body["stop"] = s.stop
    if s.logit_bias:  # OpenAI's shape; a ban (-inf) as its -100
        body["logit_bias"] = {str(t): max(b, -100.0) for t, b in s.logit_bias.items()}


def add_extra(body: dict[str, Any], request: ChatRequest) -> None:
    """The client's extension parameters (e.g. chat_template_kwargs), under what is set."""
    for key, value in request.extra.items():
        if key not in body:
            body[key] = value
