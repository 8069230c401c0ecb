"""The vocabulary's answers for llama-server's `/tokenize` and `/detokenize`: text to ids, ids
to their pieces (bytes: a piece may be part of a UTF-8 character) and back to text, special
tokens as text, as llama-server's `common_token_to_piece` gives them."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

from sluicegate.core.errors import invalid

PIECE_BYTES = 256  # the longest piece a vocabulary holds is far shorter


def tokenize(model: Any, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
    tokens: list[int] = model.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
    return tokens


def check_ids(tokens: list[int], vocab_size: int, param: str) -> None:
    """A 400 for an id the vocabulary does not have (llama.cpp would read past its tables)."""
    if any(not 0 <= t < vocab_size for t in tokens):
        raise invalid(f"Invalid '{param}': token ids must be in [0, {vocab_size}).", param=param)


def pieces(vocab: Any, tokens: list[int]) -> list[bytes]:
    buffer = ctypes.create_string_buffer(PIECE_BYTES)
    out: list[bytes] = []
    for token in tokens:
        size = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
        out.append(buffer.raw[: max(size, 0)])
    return out
