"""Sampling under a grammar the way llama-server does: the grammar only when it has to.

The grammar is llguidance's (`grammar.py` builds it; docs/structured-output.md says why). A token
is first drawn from the request's ordinary sampler chain, and only that one token is checked; if
the grammar allows it, it is the answer. Only when it does not is the draw repeated with the
grammar's token mask applied to every candidate first. A model that already writes what the
schema wants pays for one check per token; one that does not pays for one mask (tens of
microseconds on a 32k vocabulary: bench/structured_output.py).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import llama_cpp

from sluicegate.core.errors import EngineFailure

if TYPE_CHECKING:  # imported where first used (grammar.py says why; numpy: bindings.py)
    import numpy as np
    from llguidance import LLMatcher, LLTokenizer

# llama_token_data: {int32 id; float logit; float p}
_CELL = [("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]
_CELL_POINTER = ctypes.POINTER(llama_cpp.llama_token_data)
_SPECIAL = b"\xff"  # llguidance's mark for a token that is not text


def vocab_tokenizer(vocab: Any) -> LLTokenizer:
    """llguidance's view of a llama.cpp vocabulary (about a second for 256k tokens: cache it).

    Every token matches the grammar by its text, control tokens included (`<tool_call>`,
    `[TOOL_CALLS]` are literals in a tool-call grammar), as llama.cpp's own grammar sampler
    matches them; only the end-of-generation tokens are special, and they end the output where
    the grammar is complete."""
    from llguidance import LLTokenizer

    n_tokens = llama_cpp.llama_vocab_n_tokens(vocab)
    buffer = ctypes.create_string_buffer(16 * 1024)
    pieces: list[bytes] = []
    ends: list[int] = []
    for token in range(n_tokens):
        size = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
        piece = buffer.raw[: max(size, 0)]
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            ends.append(token)
            piece = _SPECIAL + piece
        pieces.append(piece)
    tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    make: Any = LLTokenizer
    tokenizer: LLTokenizer = make.from_llamacpp(
        tokens=pieces,
        vocab_ptr=vocab,
        tokenize_fptr=tokenize,
        eos_token=ends or [llama_cpp.llama_vocab_eos(vocab)],
        slices=None,
    )
    return tokenizer


class GrammarSampler:
    """A compiled grammar and the request's sampler chain (which it owns and frees)."""

    def __init__(self, tokenizer: LLTokenizer, n_vocab: int, grammar: str, chain: Any) -> None:
        import numpy as np
        from llguidance import LLMatcher

        self.chain = chain
        self.matcher: LLMatcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar), log_level=0)
        if self.matcher.is_error():
            llama_cpp.llama_sampler_free(chain)
            raise EngineFailure(
                f"the grammar could not be compiled: {self.matcher.get_error()}", code="grammar_error"
            )
        self.n_vocab = n_vocab
        self._ends = frozenset(tokenizer.eos_tokens)
        self._mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self._cells = np.zeros(n_vocab, dtype=_CELL)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._all = llama_cpp.llama_token_data_array(
            ctypes.cast(self._cells.ctypes.data, _CELL_POINTER), n_vocab, -1, False
        )

    def _candidates(self, ctx: Any, index: int = -1) -> Any:
        """Every token with its logit, as llama_sampler_sample starts from."""
        import numpy as np  # imported by __init__: a dict lookup

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

    def allowed(self) -> np.ndarray:
        """Which tokens the grammar allows next (a bool per token of the vocabulary)."""
        import numpy as np

        mask = self._mask
        self.matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: self.n_vocab]
        return bits.astype(bool)

    def _takes(self, token: int) -> bool:
        """Whether the grammar allows `token` next. (`validate_tokens` counts no end-of-turn
        token, even where the grammar is complete: that is `is_accepting`.)"""
        if token in self._ends:
            return self.matcher.is_accepting()
        return self.matcher.validate_tokens([token]) == 1

    def sample(self, ctx: Any, index: int = -1) -> int:
        """The next token from batch row `index` (-1: the last one decoded)."""
        array = self._candidates(ctx, index)
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(array))
        token = self._selected(array)
        if not self._takes(token):
            import numpy as np

            allowed = self.allowed()
            array = self._candidates(ctx, index)
            np.copyto(self._cells["logit"], -np.inf, where=~allowed)
            llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(array))
            token = self._selected(array)
        if not self.matcher.consume_token(token):
            raise EngineFailure(
                f"the grammar refused a token: {self.matcher.get_error()}", code="grammar_error"
            )
        llama_cpp.llama_sampler_accept(self.chain, token)
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.chain)
