"""The shapes of llama-server's `/tokenize`, `/detokenize` and `/props` (README, "API
Endpoints"); the routes that serve them are `sluicegate.routes.llamaserver`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluicegate.core.request import SamplingParams
from sluicegate.core.validation import Fields

Json = dict[str, Any]
MAX_TOKENS = 1 << 20  # ids in one /detokenize: far more than any context holds


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    model: str | None
    content: str
    add_special: bool
    parse_special: bool
    with_pieces: bool


def parse_tokenize(body: Any) -> TokenizeRequest:
    f = Fields(body)
    content = f.string("content")
    if content is None:
        f.fail("content", '"content" must be provided', "missing_required_parameter")
    add_special = f.boolean("add_special")
    parse_special = f.boolean("parse_special")
    return TokenizeRequest(
        model=f.string("model"),
        content=content,
        add_special=bool(add_special),
        parse_special=True if parse_special is None else parse_special,
        with_pieces=bool(f.boolean("with_pieces")),
    )


def _piece(raw: bytes) -> str | list[int]:
    """A piece that is whole UTF-8 is a string; a part of a character, its bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def tokenize_body(tokens: list[int], pieces: list[bytes] | None) -> Json:
    if pieces is None:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": _piece(p)} for t, p in zip(tokens, pieces, strict=True)]}


def parse_detokenize(body: Any) -> tuple[str | None, list[int]]:
    f = Fields(body)
    tokens = f.obj.get("tokens", [])
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        f.fail("tokens", '"tokens" must be an array of token ids')
    if len(tokens) > MAX_TOKENS:
        f.fail("tokens", f'"tokens" holds more than {MAX_TOKENS} ids')
    return f.string("model"), list(tokens)


def detokenize_body(pieces: list[bytes]) -> Json:
    return {"content": b"".join(pieces).decode("utf-8", "replace")}


def props_body(
    *,
    model_id: str,
    model_path: str | None,
    n_ctx: int | None,
    slots: int,
    chat_template: str | None,
    vision: bool,
    audio: bool,
    loaded: bool,
    build_info: str,
    defaults: SamplingParams | None = None,
) -> Json:
    """`GET /props`: the served model's properties; `default_generation_settings` holds what a
    `/completion` uses when the request says nothing: the model's `sampling` defaults (`defaults`),
    else llama.cpp's own."""
    body: Json = {
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": False,
            "params": {
                "n_predict": -1,
                "seed": -1,
                "temperature": 0.8,
                "top_k": 40,
                "top_p": 0.95,
                "min_p": 0.05,
                "repeat_penalty": 1.0,
                "presence_penalty": 0.0,
                "frequency_penalty": 0.0,
                "stop": [],
                "max_tokens": -1,
                "n_probs": 0,
                "stream": False,
            },
            "prompt": "",
        },
        "total_slots": slots,
        "model_alias": model_id,
        "model_path": model_path or "",
        "chat_template": chat_template or "",
        "chat_template_caps": {},
        "modalities": {"vision": vision, "audio": audio},
        "build_info": build_info,
        "is_sleeping": not loaded,
    }
    params: Json = body["default_generation_settings"]["params"]
    if defaults is not None:
        for key, value in (
            ("seed", defaults.seed),
            ("temperature", defaults.temperature),
            ("top_k", defaults.top_k),
            ("top_p", defaults.top_p),
            ("min_p", defaults.min_p),
            ("repeat_penalty", defaults.repeat_penalty),
            ("presence_penalty", defaults.presence_penalty),
            ("frequency_penalty", defaults.frequency_penalty),
            ("n_predict", defaults.max_tokens),
            ("max_tokens", defaults.max_tokens),
        ):
            if value is not None:
                params[key] = value
    return body


def slots_body(total: int, running: int, n_ctx: int | None) -> list[Json]:
    """`GET /slots`: one entry per sequence the model runs side by side, the first `running`
    of them processing (Sluicegate's sequences are not addressable: the count is what is true)."""
    return [
        {"id": i, "id_task": -1, "n_ctx": n_ctx, "speculative": False, "is_processing": i < running}
        for i in range(total)
    ]
