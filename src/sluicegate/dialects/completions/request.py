"""OpenAI's legacy text completion requests → a `ChatRequest` whose `prompt` is set (no
messages, no chat template; a `suffix` makes it fill-in-the-middle).

A list of several prompts is refused: the turn runner serves one generation per request (one
choice per generation), so each prompt goes in its own request. `n` choices run as `n`
generations of the one prompt (`turn/choices.py`); `best_of` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluicegate.core.request import ChatRequest, RawPrompt
from sluicegate.core.validation import INT32_MAX, Fields, logit_bias, sampling_fields, stream_fields

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
    stream, include_usage = stream_fields(f)
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
