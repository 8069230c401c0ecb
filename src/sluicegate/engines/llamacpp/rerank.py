"""A reranker's input: the query and one document as one token sequence, as llama-server makes
it. With the GGUF's rerank template (`tokenizer.chat_template.rerank`, Qwen3-Reranker's), the
template filled in; without one (BERT-style cross-encoders), query and document between the
vocabulary's own special tokens."""

from __future__ import annotations

from typing import Any

import llama_cpp


def rerank_tokens(model: Any, template: str | None, query: str, document: str) -> list[int]:
    """`model`: a `handles.Model` (a vocabulary alone will do)."""
    if template is not None:
        text = template.replace("{query}", query).replace("{document}", document)
        filled: list[int] = model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return filled
    eos = model.token_eos()
    if eos < 0:
        eos = model.token_sep()
    add_eos = bool(model.add_eos_token())
    add_sep = bool(llama_cpp.llama_vocab_get_add_sep(model.vocab))
    tokens: list[int] = [model.token_bos()] if model.add_bos_token() else []
    tokens += model.tokenize(query.encode("utf-8"), add_bos=False, special=False)
    tokens += [eos] if add_eos else []
    tokens += [model.token_sep()] if add_sep else []
    tokens += model.tokenize(document.encode("utf-8"), add_bos=False, special=False)
    tokens += [eos] if add_eos else []
    return tokens
