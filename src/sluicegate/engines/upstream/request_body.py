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
    if s.top_logprobs is not None:
        body["top_logprobs"] = s.top_logprobs
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    if fmt is not None:
        body["response_format"] = fmt
    if s.logprobs:
        body["logprobs"] = True
    if request.prediction is not None:  # OpenAI's Predicted Outputs, for an upstream that drafts
        body["prediction"] = {"type": "content", "content": request.prediction}
    if request.continue_final:  # as vLLM and llama-server take it
        body["continue_final_message"], body["add_generation_prompt"] = True, False
    add_extra(body, request)
    return body


def add_sampling(body: dict[str, Any], s: SamplingParams) -> None:
    """The sampling settings the request set (the upstream's defaults apply to the rest), one
    test a field in the order upstreams have always seen them (compiled: no table of pairs built
    per request)."""
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    if s.top_k is not None:
        body["top_k"] = s.top_k
    if s.min_p is not None:
        body["min_p"] = s.min_p
    if s.typical_p is not None:
        body["typical_p"] = s.typical_p
    if s.repeat_last_n is not None:
        body["repeat_last_n"] = s.repeat_last_n
    if s.repeat_penalty is not None:
        body["repetition_penalty"] = s.repeat_penalty
    if s.presence_penalty is not None:
        body["presence_penalty"] = s.presence_penalty
    if s.frequency_penalty is not None:
        body["frequency_penalty"] = s.frequency_penalty
    if s.seed is not None:
        body["seed"] = s.seed
    if s.max_tokens is not None:
        body["max_tokens"] = s.max_tokens
    # llama.cpp's further samplers: an upstream llama-server (or vLLM, for some) reads them
    if s.dry_multiplier is not None:
        body["dry_multiplier"] = s.dry_multiplier
    if s.dry_base is not None:
        body["dry_base"] = s.dry_base
    if s.dry_allowed_length is not None:
        body["dry_allowed_length"] = s.dry_allowed_length
    if s.dry_penalty_last_n is not None:
        body["dry_penalty_last_n"] = s.dry_penalty_last_n
    if s.dry_sequence_breakers is not None:
        body["dry_sequence_breakers"] = s.dry_sequence_breakers
    if s.xtc_probability is not None:
        body["xtc_probability"] = s.xtc_probability
    if s.xtc_threshold is not None:
        body["xtc_threshold"] = s.xtc_threshold
    if s.top_n_sigma is not None:
        body["top_n_sigma"] = s.top_n_sigma
    if s.mirostat:
        body["mirostat"] = s.mirostat
    if s.mirostat_tau is not None:
        body["mirostat_tau"] = s.mirostat_tau
    if s.mirostat_eta is not None:
        body["mirostat_eta"] = s.mirostat_eta
    if s.ignore_eos:
        body["ignore_eos"] = s.ignore_eos
    if s.stop:
        body["stop"] = s.stop
    if s.logit_bias:  # OpenAI's shape; a ban (-inf) as its -100
        body["logit_bias"] = {str(t): max(b, -100.0) for t, b in s.logit_bias.items()}


def add_extra(body: dict[str, Any], request: ChatRequest) -> None:
    """The client's extension parameters (e.g. chat_template_kwargs), under what is set."""
    for key, value in request.extra.items():
        if key not in body:
            body[key] = value
