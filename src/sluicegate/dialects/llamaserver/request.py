"""`POST /completion` requests → a `ChatRequest` whose `prompt` is set (no chat template), with
llama.cpp's sampling names (`n_predict`, `n_probs`, `top_k`, `min_p`, `repeat_penalty`, …).

What llama-server takes and Sluicegate does not act on is accepted and ignored, as llama-server
ignores what it does not know: `cache_prompt` (the engine keeps its prompt cache anyway),
`n_keep`, `t_max_predict_ms`, `samplers`, `timings_per_token`. Several prompts in one
request (llama-server answers an array) and prompts that mix strings with token ids are refused
with a 400 naming `prompt`: one request, one generation. `id_slot` pins the generation to one
of the model's slots (`ChatRequest.extra[SLOT]`; an engine whose sequences are not slots ignores it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluicegate.core.request import ChatRequest, RawPrompt
from sluicegate.core.slots import LORA, SLOT
from sluicegate.core.validation import INT32_MAX, Fields, logit_bias, sampling_fields

MAX_PROBS = 20  # n_probs: as the other completions dialects allow
MAX_STOPS = 64


@dataclass(slots=True)
class CompletionOptions:
    stream: bool
    n_predict: int  # as asked (-1: until the model stops), for `generation_settings`
    return_tokens: bool
    settings: dict[str, Any] = field(default_factory=dict)  # `generation_settings`, as read
    id_slot: int = -1  # as asked (-1: any slot)


def _is_tokens(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _prompt(f: Fields) -> str | list[int]:
    """A string, token ids, or an array holding one of them."""
    value = f.obj.get("prompt")
    if value is None:
        f.fail("prompt", '"prompt" must be provided', "missing_required_parameter")
    if isinstance(value, str) or _is_tokens(value):
        return value if isinstance(value, str) else list(value)
    if isinstance(value, list) and len(value) == 1 and (isinstance(value[0], str) or _is_tokens(value[0])):
        return value[0] if isinstance(value[0], str) else list(value[0])
    if isinstance(value, list) and len(value) > 1 and all(isinstance(v, str) or _is_tokens(v) for v in value):
        f.fail(
            "prompt",
            f"{len(value)} prompts in one request: Sluicegate generates one completion per "
            "request, so send each prompt in its own request.",
            "unsupported_parameter",
        )
    f.fail(
        "prompt",
        '"prompt" must be a string, an array of token ids, or an array of one of them '
        "(strings mixed with token ids are not supported).",
    )


def _constraint(f: Fields) -> dict[str, Any] | None:
    """`grammar` (GBNF) or `json_schema` (a schema; `{}`: any JSON) as the engine's
    `response_format`: what the output must match."""
    grammar = f.string("grammar")
    schema = f.object("json_schema")
    if grammar and schema is not None:
        f.fail("grammar", "Send 'grammar' or 'json_schema', not both.")
    if grammar:
        return {"type": "grammar", "grammar": grammar}
    if schema is not None:
        return {"type": "json_schema", "json_schema": {"schema": schema.obj}}
    return None


def parse_completion(body: Any, default_model: str | None) -> tuple[ChatRequest, CompletionOptions]:
    """`default_model`: the model a request without `model` goes to (llama-server serves one;
    its clients name none)."""
    f = Fields(body)
    model = f.string("model") or default_model or ""
    text = _prompt(f)
    s = sampling_fields(f)
    n_predict = f.integer("n_predict", low=-1, high=INT32_MAX)
    if n_predict is None:
        n_predict = f.integer("max_tokens", low=-1, high=INT32_MAX)
    n_predict = -1 if n_predict is None else n_predict
    if n_predict == 0:
        f.fail(
            "n_predict", "n_predict = 0 (evaluate the prompt only) is not supported; ask for 1 or more tokens"
        )
    s.max_tokens = None if n_predict < 0 else n_predict
    n_probs = f.integer("n_probs", low=0, high=MAX_PROBS) or 0
    if n_probs:
        s.logprobs, s.top_logprobs = True, n_probs
    s.stop = f.stop(most=MAX_STOPS)
    s.logit_bias = logit_bias(f)
    stream = bool(f.boolean("stream"))
    settings: dict[str, Any] = {
        "n_predict": n_predict,
        "seed": -1 if s.seed is None else s.seed,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "stop": s.stop,
        "n_probs": n_probs,
        "stream": stream,
    }
    request = ChatRequest(model=model, messages=[], sampling=s, prompt=RawPrompt(text))
    request.response_format = _constraint(f)
    id_slot = f.integer("id_slot", low=-1, high=INT32_MAX)
    if id_slot is not None and id_slot >= 0:
        request.extra[SLOT] = id_slot
    if f.obj.get("lora") is not None:  # read by the engine, which knows its adapters
        request.extra[LORA] = f.obj["lora"]
    options = CompletionOptions(
        stream=stream,
        n_predict=n_predict,
        return_tokens=bool(f.boolean("return_tokens")),
        settings={k: v for k, v in settings.items() if v is not None},
        id_slot=-1 if id_slot is None else id_slot,
    )
    return request, options
