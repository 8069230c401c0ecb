"""Text completion requests: OpenAI's legacy completions and llama-server's infill → a
`ChatRequest` whose `prompt` is set (no messages, no chat template).

A list of several prompts is refused: the turn runner serves one generation per request (one
choice per generation), so each prompt goes in its own request. `n` choices run as `n`
generations of the one prompt (`turn/choices.py`); `best_of` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluicegate.core.request import ChatRequest, FileChunk, RawPrompt
from sluicegate.core.validation import INT32_MAX, Fields, logit_bias, sampling_fields

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for a completion
MAX_LOGPROBS = 20  # OpenAI allows 5; llama.cpp and vLLM give more


@dataclass(slots=True)
class CompletionOptions:
    stream: bool
    include_usage: bool
    echo: bool


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _prompt(f: Fields) -> str | list[int]:
    """A string, token ids, or a list of one of them (each non-empty when a list)."""
    if "prompt" not in f.obj or f.obj["prompt"] is None:
        f.fail("prompt", "Missing required parameter: 'prompt'.", "missing_required_parameter")
    value = f.obj["prompt"]
    if isinstance(value, str):
        return value
    if _is_tokens(value) and value:
        return list(value)
    if isinstance(value, list) and value and all(isinstance(v, str) or (_is_tokens(v) and v) for v in value):
        if len(value) > 1:
            f.fail(
                "prompt",
                f"Invalid 'prompt': {len(value)} prompts in one request; Sluicegate generates one "
                "completion per request, so send each prompt in its own request.",
                "unsupported_parameter",
            )
        first = value[0]
        return first if isinstance(first, str) else list(first)
    f.fail(
        "prompt",
        "Invalid 'prompt': expected a string, an array of token ids, or an array of one string "
        "or one array of token ids (none of them empty).",
    )


def parse_completion_request(body: Any) -> tuple[ChatRequest, CompletionOptions]:
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    text = _prompt(f)
    suffix = f.string("suffix")
    echo = bool(f.boolean("echo"))
    stream = bool(f.boolean("stream"))
    include_usage = False
    options = f.object("stream_options")
    if options is not None:
        if not stream:
            f.fail(
                "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."
            )
        include_usage = bool(options.boolean("include_usage"))
    s = sampling_fields(f)
    max_tokens = f.integer("max_tokens", low=1, high=INT32_MAX)
    s.max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    s.n = f.integer("n", low=1, high=128) or 1
    best_of = f.integer("best_of", low=1, high=128)
    if best_of is not None and best_of > 1:
        f.fail(
            "best_of", "'best_of' above 1 is not supported: Sluicegate generates one completion per request."
        )
    if best_of is not None and best_of < s.n:  # OpenAI's rule: best_of counts the candidates
        f.fail("best_of", "best_of must be greater than or equal to n.")
    logprobs = f.integer("logprobs", low=0, high=MAX_LOGPROBS)
    if logprobs is not None:
        s.logprobs, s.top_logprobs = True, logprobs
    s.stop = f.stop()
    s.logit_bias, s.logit_bias_text = logit_bias(f)
    f.string("user")
    prompt = RawPrompt(text, suffix=suffix, echo=echo)
    request = ChatRequest(model=model, messages=[], sampling=s, prompt=prompt)
    return request, CompletionOptions(stream=stream, include_usage=include_usage, echo=echo)


@dataclass(slots=True)
class InfillOptions:
    stream: bool
    n_predict: int  # as asked (-1: until the model stops), for `generation_settings`


def parse_infill_request(body: Any, default_model: str | None) -> tuple[ChatRequest, InfillOptions]:
    """llama-server's `/infill`: `input_prefix` and `input_suffix` (required), `input_extra`
    files, `prompt` (the start of the middle), `n_predict` (-1: no limit), llama.cpp sampling.
    `model` may be left out when one model can serve it (`default_model`)."""
    f = Fields(body)
    model = f.string("model") or default_model
    if model is None:
        f.fail(
            "model",
            "Missing required parameter: 'model' (several models are served).",
            "missing_required_parameter",
        )
    for key in ("input_prefix", "input_suffix"):
        if not isinstance(f.obj.get(key), str):
            f.fail(key, f'"{key}" is required and must be a string')
    extra: list[FileChunk] = []
    raw_extra = f.array("input_extra")
    for chunk in f.items("input_extra", raw_extra or []):
        text = chunk.string("text", required=True)
        assert text is not None
        extra.append(FileChunk(chunk.string("filename") or "tmp", text))
    middle = f.string("prompt") or ""
    s = sampling_fields(f)
    n_predict = f.integer("n_predict", low=-1, high=INT32_MAX)
    if n_predict is None:
        n_predict = f.integer("max_tokens", low=-1, high=INT32_MAX)
    n_predict = -1 if n_predict is None else n_predict
    if n_predict == 0:
        f.fail("n_predict", "Invalid 'n_predict': expected -1 (no limit) or a positive number of tokens.")
    s.max_tokens = None if n_predict < 0 else n_predict
    n_probs = f.integer("n_probs", low=0, high=MAX_LOGPROBS)
    if n_probs:
        s.logprobs, s.top_logprobs = True, n_probs
    s.stop = f.stop(most=64)
    prompt = RawPrompt(f.obj["input_prefix"], suffix=f.obj["input_suffix"], extra=extra, middle=middle)
    request = ChatRequest(model=model, messages=[], sampling=s, prompt=prompt)
    return request, InfillOptions(stream=bool(f.boolean("stream")), n_predict=n_predict)
