"""A llama.cpp sampler chain that starts with top-k, run on the k candidates numpy finds in the
logits llama.cpp computed, instead of on a candidate array of the whole vocabulary.

`llama_sampler_sample` copies every logit into a `llama_token_data` array (262,144 x 12 bytes
on Gemma 3) and partially sorts all of it for top-k, every token: ~0.2 ms of the worker's CPU
per token on Gemma 3 (bench/README.md, host_side.py). Here numpy finds the k largest logits
(looking only near the largest: one pass) and hands them, best first, to the request's own chain
(`llama_sampler_apply` on a k-entry array marked sorted): top-k then keeps them as they are, and
every later sampler (typical-p, top-p, min-p, XTC, temperature, the seeded draw) runs llama.cpp's
own code on what llama.cpp's top-k would have left it, with the chain's own random state. So the
same token for the same seed as `llama_sampler_sample`, but where two logits tie at the k-th
place (the lower token id is kept here, std::partial_sort's heap decides there) or tie within
the k (ordered by token id here).

Used for a vocabulary large enough that the whole-vocabulary array costs more than numpy's
calls (runtime.py, `FAST_CHAIN_VOCAB`); the engine imports numpy before such a job reaches the
worker. Samplers that must see the whole vocabulary (logit bias, penalties, DRY, top-n-sigma,
mirostat) come before top-k or replace it, and keep `llama_sampler_sample`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

SPREAD = 10.0  # the logits within this of the largest: a few hundred of Gemma 3's 262,144
STRIDE = 64  # the sample a peaked row's threshold comes from
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class TopKChain:
    """The request's chain (owned by its `_Samplers`), fed its top k candidates; one thread."""

    __slots__ = ("_array", "_base", "_chain", "_data", "_k", "_pointer")

    def __init__(self, chain: Any, top_k: int, n_vocab: int) -> None:
        self._chain = chain
        self._k = min(top_k, n_vocab)
        self._data = np.zeros(self._k, TOKEN_DATA)
        self._base = self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        self._array = llama_cpp.llama_token_data_array(self._base, self._k, -1, True)
        self._pointer = ctypes.pointer(self._array)

    def sample(self, logits: np.ndarray) -> int:
        """The token the chain draws from `logits` (float32, the whole vocabulary), accepted
        by the chain as `llama_sampler_sample` accepts it."""
        self.apply(logits)
        array = self._array
        token = int(array.data[array.selected].id)  # XTC may have moved `data` on
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def apply(self, logits: np.ndarray) -> llama_cpp.llama_token_data_array:
        """The chain applied to the top k: the candidates it keeps, their probabilities and
        the one it selected, in the array (valid until the next call)."""
        ids, values = top_k(logits, self._k)
        data, array = self._data, self._array
        data["id"] = ids
        data["logit"] = values
        data["p"] = 0.0  # as llama_sampler_sample fills it
        array.data = self._base  # type: ignore[assignment]  # (the bindings' stub says Array)
        array.size, array.selected, array.sorted = self._k, -1, True
        llama_cpp.llama_sampler_apply(self._chain, self._pointer)
        return array


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits' token ids and values, largest first; ties by token id.

    The top k of the logits at or above a threshold are the top k of all as soon as k of them
    are there. First tried: within SPREAD of the largest (a few hundred on Gemma 3). A peaked
    row has fewer there; then the k-th largest of every STRIDE-th logit, which at least k
    logits reach (a few thousand), rather than a wider spread (most of the vocabulary)."""
    ids = np.flatnonzero(logits >= logits.max() - SPREAD)
    if ids.size < k:
        sample = logits[::STRIDE]
        if sample.size >= k:
            floor = np.partition(sample, sample.size - k)[sample.size - k]
            ids = np.flatnonzero(logits >= floor)
        else:  # a vocabulary under STRIDE * k: all of it
            ids = np.arange(logits.size)
    values = logits[ids]
    if ids.size > k:
        kth = np.partition(values, ids.size - k)[ids.size - k]  # the kth largest
        above = np.flatnonzero(values > kth)
        ties = np.flatnonzero(values == kth)[: k - above.size]  # the lowest ids of the tied
        keep = np.sort(np.concatenate((above, ties)))
        ids, values = ids[keep], values[keep]
    order = np.argsort(-values, kind="stable")
    return ids[order], values[order]
