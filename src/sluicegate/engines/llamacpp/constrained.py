"""Sampling under a grammar the way llama-server does: the grammar only when it has to.

Checking every vocabulary token against a grammar on every step costs about a third more CPU
per token on a small model with a 32k vocabulary (bench/structured_output.py). So a token is
first drawn from the request's ordinary sampler chain, and only that one token is checked; if
the grammar allows it, it is the answer. Only when it does not is the draw repeated with the
grammar applied to every candidate first. A model that already writes what the schema wants
pays for one check per token.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import llama_cpp
import numpy as np

from sluicegate.core.errors import EngineFailure

# llama_token_data: {int32 id; float logit; float p}
_CELL = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
_CELL_POINTER = ctypes.POINTER(llama_cpp.llama_token_data)


class GrammarSampler:
    """A grammar and the request's sampler chain (which it owns and frees)."""

    def __init__(self, vocab: Any, n_vocab: int, grammar: str, root: str, chain: Any) -> None:
        self.chain = chain
        self.grammar = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), root.encode())
        if not self.grammar:
            llama_cpp.llama_sampler_free(chain)
            raise EngineFailure("llama.cpp could not parse the grammar", code="grammar_error")
        self.n_vocab = n_vocab
        self._cells = np.zeros(n_vocab, dtype=_CELL)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._all = llama_cpp.llama_token_data_array(
            ctypes.cast(self._cells.ctypes.data, _CELL_POINTER), n_vocab, -1, False
        )
        self._one_cell = (llama_cpp.llama_token_data * 1)()
        self._one = llama_cpp.llama_token_data_array(self._one_cell, 1, -1, False)

    def _candidates(self, ctx: Any, index: int = -1) -> Any:
        """Every token with its logit, as llama_sampler_sample starts from."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, index), shape=(self.n_vocab,))
        cells = self._cells
        cells["id"] = self._ids  # samplers sort and cut the array in place
        cells["logit"] = logits
        cells["p"] = 0.0
        array = self._all
        array.size, array.selected, array.sorted = self.n_vocab, -1, False
        return array

    def _selected(self, array: Any) -> int:
        if not 0 <= array.selected < array.size:
            raise EngineFailure("no token satisfies the grammar", code="grammar_error")
        return int(self._cells["id"][array.selected])

    def _allowed(self, token: int) -> bool:
        self._one_cell[0] = llama_cpp.llama_token_data(token, 1.0, 0.0)
        one = self._one
        one.size, one.selected, one.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(one))
        return not math.isinf(float(self._one_cell[0].logit))

    def sample(self, ctx: Any, index: int = -1) -> int:
        """The next token from batch row `index` (-1: the last one decoded)."""
        array = self._candidates(ctx, index)
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(array))
        token = self._selected(array)
        if not self._allowed(token):
            array = self._candidates(ctx, index)
            llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(array))
            llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(array))
            token = self._selected(array)
        llama_cpp.llama_sampler_accept(self.grammar, token)
        llama_cpp.llama_sampler_accept(self.chain, token)
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.grammar)
        llama_cpp.llama_sampler_free(self.chain)
