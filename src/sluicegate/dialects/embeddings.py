"""The OpenAI embeddings wire format (`POST /v1/embeddings`, LM Studio's `/api/v0/embeddings`).

Input: a string, a list of strings, a list of token ids, or a list of such lists (as OpenAI
takes them); `encoding_format` `float` (default) or `base64` (little-endian float32, as OpenAI
sends it); `dimensions`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from sluicegate.core.embeddings import EmbedInput, EmbedRequest, EmbedResult, check_inputs
from sluicegate.core.errors import invalid
from sluicegate.core.validation import Fields


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    embed: EmbedRequest
    encoding_format: str  # "float" or "base64"


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one(value: Any) -> EmbedInput | None:
    """One input: a string, token ids, ids with strings among them (llama-server), or
    llama-server's objects `{"prompt_string": ...}` and `{"content": [text parts]}`; None: not
    one of them."""
    if isinstance(value, dict):
        if "prompt_string" in value and not value.get("multimodal_data"):
            return _one(value["prompt_string"]) if not isinstance(value["prompt_string"], dict) else None
        parts = value.get("content")
        if (
            isinstance(parts, list)
            and parts
            and all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                for p in parts
            )
        ):
            return "".join(p["text"] for p in parts)
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(_is_id(v) or isinstance(v, str) for v in value):
        if all(_is_id(v) for v in value):
            return [int(v) for v in value]
        if any(_is_id(v) for v in value):
            return list(value)
    return None


def _inputs(value: Any) -> list[EmbedInput]:
    """OpenAI's `input` (a string, token ids, or an array of either), and llama-server's
    extensions of it; an array holding a token id is one input, as llama-server reads it."""
    single = _one(value)
    if single is not None:
        return [single]
    if isinstance(value, list) and value:
        inputs = [_one(v) for v in value]
        if all(i is not None for i in inputs):
            return [i for i in inputs if i is not None]
    raise invalid(
        "Invalid 'input': expected a string, an array of strings, an array of token ids, or an "
        "array of token-id arrays (none of them empty).",
        param="input",
    )


def parse_embeddings_request(body: Any) -> EmbeddingsRequest:
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    if "input" not in f.obj:
        f.fail("input", "Missing required parameter: 'input'.")
    inputs = _inputs(f.obj["input"])
    check_inputs(inputs)
    encoding = f.string("encoding_format", choices=("float", "base64")) or "float"
    dimensions = f.integer("dimensions", low=1)
    f.string("user")
    return EmbeddingsRequest(model, EmbedRequest(inputs, dimensions), encoding)


def _encode(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        import numpy as np  # here: a server that encodes no embeddings never loads it

        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


def embeddings_body(model: str, result: EmbedResult, encoding_format: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": _encode(vector, encoding_format)}
            for index, vector in enumerate(result.vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }
