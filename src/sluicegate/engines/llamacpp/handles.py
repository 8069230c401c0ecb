"""The llama.cpp objects one loaded GGUF owns (weights, context, batch), each freed once.

What llama-cpp-python's `_internals.LlamaModel` / `LlamaContext` / `LlamaBatch` gave the engine,
with the same names and errors, on the bindings alone: `_internals` imports numpy (~12 MiB of
RSS) for methods the engine never calls (bindings.py says why that matters). A context is freed
before the model it came from, whichever is closed first.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp

from sluicegate.engines.llamacpp.kv_pages import exclusive, released_after


class Model:
    """A GGUF's weights (or with `params.vocab_only` its tokenizer alone) and its vocabulary."""

    def __init__(self, *, path_model: str, params: Any) -> None:
        if not os.path.exists(path_model):
            raise ValueError(f"Model path does not exist: {path_model}")
        self._dependents: list[Callable[[], None]] = []  # contexts: freed before the weights
        with exclusive():  # its buffers written while no context's pages are released
            self.model: Any = llama_cpp.llama_model_load_from_file(path_model.encode("utf-8"), params)
        if not self.model:
            self.model = None
            raise ValueError(f"Failed to load model from file: {path_model}")
        self.vocab: Any = llama_cpp.llama_model_get_vocab(self.model)
        if not self.vocab:
            self.close()
            raise ValueError(f"Failed to get vocab from model: {path_model}")

    def close(self) -> None:
        while self._dependents:
            self._dependents.pop()()
        if self.model is not None:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:
        if getattr(self, "_dependents", None) is not None:  # a constructor that raised early
            self.close()

    def n_vocab(self) -> int:
        return int(llama_cpp.llama_vocab_n_tokens(self.vocab))

    def token_bos(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.vocab))

    def token_eos(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.vocab))

    def token_sep(self) -> int:
        return int(llama_cpp.llama_vocab_sep(self.vocab))

    def add_bos_token(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def add_eos_token(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_eos(self.vocab))

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        """The text's token ids; read-only use of the vocabulary, safe from any thread. The
        first try has room for the training context; a longer text is tokenized again into the
        room llama.cpp says it needs."""
        room = int(llama_cpp.llama_model_n_ctx_train(self.model))
        for _ in range(2):
            tokens = (llama_cpp.llama_token * room)()
            count = llama_cpp.llama_tokenize(self.vocab, text, len(text), tokens, room, add_bos, special)
            if count >= 0:
                return list(tokens[:count])
            room = -count
        raise RuntimeError(f'Failed to tokenize: text="{text!r}" n_tokens={count}')

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        """The tokens' bytes (`_internals.LlamaModel.detokenize`: a leading space after BOS,
        which Llama 1 vocabularies add, dropped)."""
        buffer = ctypes.create_string_buffer(256)
        pieces = []
        for token in tokens:
            size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
            pieces.append(buffer.raw[: max(size, 0)])
        output = b"".join(pieces)
        if tokens and tokens[0] == self.token_bos() and output[:1] == b" ":
            return output[1:]
        return output


class Context:
    """A llama.cpp context on a model (its KV cache is `memory`: None for models without one).
    The cache's pages of zeros llama.cpp wrote when it made it are handed back (kv_pages.py):
    `released` is their bytes."""

    def __init__(self, *, model: Model, params: Any) -> None:
        with released_after() as released:
            self.ctx: Any = llama_cpp.llama_init_from_model(model.model, params)
        self._released = released
        self.released = released.bytes
        if not self.ctx:
            self.ctx = None
            raise ValueError("Failed to create llama_context")
        self.memory: Any = llama_cpp.llama_get_memory(self.ctx)
        model._dependents.append(self.close)

    def clear_memory(self) -> None:
        """Empty the KV cache and its data (`llama_memory_clear(memory, True)`: zeros over all
        of it), and hand its pages back again. From the context's own thread."""
        llama_cpp.llama_memory_clear(self.memory, True)
        self._released.again()

    def close(self) -> None:
        if self.ctx is not None:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        if getattr(self, "ctx", None) is not None:
            self.close()


class Batch:
    """A `llama_batch` of up to `n_tokens` tokens (or `embd`-sized embeddings)."""

    def __init__(self, *, n_tokens: int, embd: int, n_seq_max: int) -> None:
        self.batch: Any = llama_cpp.llama_batch_init(n_tokens, embd, n_seq_max)

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None

    def __del__(self) -> None:
        if getattr(self, "batch", None) is not None:
            self.close()

    def set_batch(self, tokens: Sequence[int], n_past: int, logits_all: bool) -> None:
        """One sequence (0) of `tokens` from position `n_past`; logits for the last (or all)."""
        batch = self.batch
        count = len(tokens)
        batch.n_tokens = count
        for i in range(count):
            batch.token[i] = tokens[i]
            batch.pos[i] = n_past + i
            batch.seq_id[i][0] = 0
            batch.n_seq_id[i] = 1
            batch.logits[i] = logits_all
        batch.logits[count - 1] = True
