"""`POST /completion` requests → a `ChatRequest` whose `prompt` is set (no chat template), with
llama.cpp's sampling names (`n_predict`, `n_probs`, `top_k`, `min_p`, `repeat_penalty`, …).

What llama-server takes and Sluicegate does not act on is accepted and ignored, as llama-server
ignores what it does not know: `cache_prompt` (the engine keeps its prompt cache anyway),
`t_max_predict_ms`, `samplers`, `timings_per_token`. `n_keep` is what a context shift keeps
(`ChatRequest.extra[N_KEEP]`, read by an engine that shifts). Several prompts in one request
are one generation each, answered as an array (the dialect's `choices`). `id_slot` pins the
generation to one of the model's slots (`ChatRequest.extra[SLOT]`; an engine whose sequences
are not slots ignores it). A prompt object's `multimodal_data` (base64 images, one per
`<__media__>` marker in its `prompt_string`) becomes the prompt's image parts (`RawPrompt.media`),
decoded by the turn runner and read by the engine's projector as a message's images are.

`POST /infill` takes the same options around a fill-in-the-middle prompt (`parse_infill`), as
llama-server passes its body on to the same completion handler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluicegate.core.request import ChatRequest, ContentPart, FileChunk, RawPrompt
from sluicegate.core.slots import LORA, N_KEEP, SLOT
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
    prompts: list[PromptValue] = field(default_factory=list)  # every prompt, in order
    response_fields: list[str] | None = None  # only these (`a/b`: b inside a), flattened
    post_sampling_probs: bool = False  # `prob`/`top_probs` in place of logprobs
    return_progress: bool = False  # streamed: `prompt_progress` objects while the prompt decodes


PromptValue = str | list[int] | list[int | str]
MAX_PROMPTS = 16  # prompts in one request: each is a generation of its own
PROMPT_STRING, MULTIMODAL = "prompt_string", "multimodal_data"  # llama-server's prompt object


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT32_MAX


def _media(f: Fields, value: dict[str, Any]) -> list[ContentPart]:
    """A prompt object's `multimodal_data`: base64 images, one per media marker in its
    `prompt_string`, as image parts (decoded later, with a message's images' limits)."""
    if MULTIMODAL not in value:
        return []
    data = value[MULTIMODAL]
    if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
        f.fail("prompt", f"'{MULTIMODAL}' must be an array of base64 strings.")
    if not isinstance(value[PROMPT_STRING], str):
        f.fail("prompt", f"A prompt object with '{MULTIMODAL}' needs '{PROMPT_STRING}' as a string.")
    # A data URL's type is not read: the bytes say what they are, as llama-server reads them.
    return [ContentPart(type="image", image_url=f"data:;base64,{d.strip()}") for d in data]


def _one(f: Fields, value: Any, media: list[ContentPart]) -> PromptValue | None:
    """One prompt as llama-server reads it: a string, token ids, ids and strings mixed (one
    sequence), or `{"prompt_string": ...}` holding one of those (and its `multimodal_data`,
    added to `media`); None: none of them."""
    if isinstance(value, dict) and PROMPT_STRING in value:
        media += _media(f, value)
        value = value[PROMPT_STRING]
        if isinstance(value, dict):
            return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) or _is_id(v) for v in value):
        if all(_is_id(v) for v in value):
            return [int(v) for v in value]
        return list(value)
    return None


def _prompts(f: Fields) -> tuple[list[PromptValue], list[ContentPart]]:
    """llama-server's `prompt`: one prompt, or an array of them (an array holding any token id
    is one prompt). Several prompts: one generation each, answered as an array. And the one
    prompt's images (`multimodal_data`)."""
    value = f.obj.get("prompt")
    if value is None:
        f.fail("prompt", '"prompt" must be provided', "missing_required_parameter")
    media: list[ContentPart] = []
    if isinstance(value, list) and value and not any(_is_id(v) for v in value):
        if len(value) > MAX_PROMPTS:
            f.fail("prompt", f"At most {MAX_PROMPTS} prompts in one request.")
        prompts = [_one(f, v, media) for v in value]
    else:
        prompts = [_one(f, value, media)]
    if any(p is None for p in prompts):
        f.fail(
            "prompt",
            '"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt '
            "string, or a list of mixed strings & tokens.",
        )
    if media and len(prompts) > 1:
        f.fail(
            "prompt",
            f"'{MULTIMODAL}' is supported in a request with one prompt; send each prompt with images "
            "as a request of its own.",
            "unsupported_parameter",
        )
    return [p for p in prompts if p is not None], media


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


def _response_fields(f: Fields) -> list[str] | None:
    value = f.obj.get("response_fields")
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        f.fail("response_fields", "'response_fields' must be an array of strings.")
    return list(value)


def parse_completion(body: Any, default_model: str | None) -> tuple[ChatRequest, CompletionOptions]:
    """`default_model`: the model a request without `model` goes to (llama-server serves one;
    its clients name none)."""
    f = Fields(body)
    model = f.string("model") or default_model or ""
    prompts, media = _prompts(f)
    return _completion(f, model, RawPrompt(prompts[0], media=media), prompts)


def _extra(f: Fields) -> list[FileChunk]:
    """`/infill`'s `input_extra`: `{"text", "filename"?}` chunks, refused in llama-server's words."""
    value = f.obj.get("input_extra")
    if value is None:
        return []
    if not isinstance(value, list):
        f.fail("input_extra", '"input_extra" must be an array of {"filename": string, "text": string}')
    chunks = []
    for i, chunk in enumerate(value):
        text = chunk.get("text") if isinstance(chunk, dict) else None
        if not isinstance(text, str):
            f.fail(f"input_extra[{i}]", 'extra_context chunk must contain a "text" field with a string value')
        filename = chunk.get("filename", "tmp")
        if not isinstance(filename, str):
            f.fail(f"input_extra[{i}]", 'extra_context chunk\'s "filename" field must be a string')
        chunks.append(FileChunk(filename, text))
    return chunks


def parse_infill(body: Any, default_model: str | None) -> tuple[ChatRequest, CompletionOptions]:
    """llama-server's `/infill`: `input_prefix` and `input_suffix` (required), `input_extra`
    files, `prompt` (a string: the start of the middle), and every option of `/completion`.
    `model` may be left out when one model can fill in the middle (`default_model`)."""
    f = Fields(body)
    model = f.string("model") or default_model
    if model is None:
        f.fail(
            "model",
            "Missing required parameter: 'model' (several models are served).",
            "missing_required_parameter",
        )
    middle = f.obj.get("prompt")
    if middle is None:
        middle = ""
    elif not isinstance(middle, str):
        f.fail("prompt", '"prompt" must be a string')
    for key in ("input_prefix", "input_suffix"):
        if key not in f.obj:
            f.fail(key, f'"{key}" is required', "missing_required_parameter")
        if not isinstance(f.obj[key], str):
            f.fail(key, f'"{key}" must be a string')
    prompt = RawPrompt(f.obj["input_prefix"], suffix=f.obj["input_suffix"], extra=_extra(f), middle=middle)
    return _completion(f, model, prompt, [])


def _completion(
    f: Fields, model: str, prompt: RawPrompt, prompts: list[PromptValue]
) -> tuple[ChatRequest, CompletionOptions]:
    """Every option `/completion` and `/infill` share, around the prompt each lays out
    (`prompts`: a `/completion`'s, one generation each; none for `/infill`, one generation)."""
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
    s.logit_bias, s.logit_bias_text = logit_bias(f)
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
        # llama.cpp's adaptive-p sampler is not built: reported off, as llama-server's default.
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
    }
    s.n = max(len(prompts), 1)
    s.token_ids = stream or bool(f.boolean("return_tokens"))  # streamed chunks always carry them
    request = ChatRequest(model=model, messages=[], sampling=s, prompt=prompt)
    request.response_format = _constraint(f)
    id_slot = f.integer("id_slot", low=-1, high=INT32_MAX)
    if id_slot is not None and id_slot >= 0:
        request.extra[SLOT] = id_slot
    if f.obj.get("lora") is not None:  # read by the engine, which knows its adapters
        request.extra[LORA] = f.obj["lora"]
    n_keep = f.integer("n_keep", low=-1, high=INT32_MAX)
    if n_keep:  # what a context shift keeps (the engine's `context_shift`); 0: its default
        request.extra[N_KEEP] = n_keep
    options = CompletionOptions(
        stream=stream,
        n_predict=n_predict,
        return_tokens=bool(f.boolean("return_tokens")),
        settings={k: v for k, v in settings.items() if v is not None},
        id_slot=-1 if id_slot is None else id_slot,
        prompts=prompts,
        response_fields=_response_fields(f),
        post_sampling_probs=bool(f.boolean("post_sampling_probs")),
        return_progress=stream and bool(f.boolean("return_progress")),
    )
    return request, options
