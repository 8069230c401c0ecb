"""llama.cpp's default sampler chain (top-k, top-p, min-p, temperature, a seeded draw) run on the
logits llama.cpp computed, without the candidate array of the whole vocabulary.

`llama_sampler_sample` copies every logit into a `llama_token_data` array (262,144 x 12 bytes
on Gemma 3) and partially sorts all of it for top-k, every token: ~0.2-0.3 ms of the worker's
CPU per token on Gemma 3 (bench/README.md, host_side.py). Here numpy finds the top k among the
logits near the largest (one pass), and the rest runs on those k values with llama.cpp's own
arithmetic in its order (src/llama-sampler.cpp): top-p's softmax and running sum in float32,
min-p's threshold on the raw logits, temperature as a float32 division, then the draw's softmax
summed in double against a uniform double from the same mt19937 stream, seeded as llama.cpp
seeds it. So the same token for the same seed as llama.cpp's chain, but where two logits tie
(ordered by token id here, by std::partial_sort's heap there) or expf's last bit differs at a
boundary.

Used for a vocabulary large enough that the candidate array costs more than numpy's fixed cost
per call (runtime.py, `FAST_CHAIN_VOCAB`); the engine imports numpy before such a job reaches
the worker.
"""

from __future__ import annotations

import math

import numpy as np

SPREAD = 10.0  # the logits within this of the largest: a few hundred of Gemma 3's 262,144
_TWO_32 = 4294967296.0
_TWO_64 = 18446744073709551616.0
_BELOW_ONE = math.nextafter(1.0, 0.0)

ChainParams = tuple[int, float, float, float]  # top-k, top-p, min-p, temperature


class DefaultChain:
    """One request's chain: its parameters and its random stream (a job's, on one thread)."""

    __slots__ = ("_bits", "_k", "_log_min_p", "_min_p", "_temperature", "_top_p")

    def __init__(self, params: ChainParams, seed: int, n_vocab: int) -> None:
        top_k, top_p, min_p, temperature = params
        self._k = min(top_k, n_vocab)
        # float32, as llama.cpp's samplers keep them
        self._top_p = np.float32(top_p)
        self._min_p = np.float32(min_p)
        # logf(p) rounded to float32, as min-p adds it to the top logit
        self._log_min_p = np.float32(math.log(self._min_p)) if self._min_p > 0 else np.float32(0)
        self._temperature = np.float32(temperature)
        self._bits = mt19937(seed)

    def sample(self, logits: np.ndarray) -> int:
        """The token drawn from `logits` (float32, the whole vocabulary)."""
        ids, top = self.candidates(logits)
        return int(ids[self.pick(top)])

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-k, top-p and min-p: the tokens kept, best first, and their raw logits."""
        ids, top = top_k(logits, self._k)
        n = len(top)
        if self._top_p < 1:
            # top-p: softmax over the top k (float32 sums, in order), keep until the running
            # sum of probabilities reaches p (at least one token)
            weights = expf(top - top[0])
            probs = weights / np.cumsum(weights)[-1]
            reached = np.flatnonzero(np.cumsum(probs) >= self._top_p)
            if reached.size:
                n = int(reached[0]) + 1
        if self._min_p > 0 and n > 1:
            # min-p: keep the tokens whose logit is within log(p) of the top one (the first always)
            floor = top[0] + self._log_min_p
            below = np.flatnonzero(top[1:n] < floor)
            if below.size:
                n = int(below[0]) + 1
        return ids[:n], top[:n]

    def pick(self, top: np.ndarray) -> int:
        """Temperature, then the draw: the index into `top` (raw logits, best first)."""
        uniform = self._uniform()  # drawn even for a single candidate, as llama.cpp does
        if len(top) == 1:
            return 0
        scaled = top / self._temperature
        cumulative = np.cumsum(expf(scaled - scaled[0]).astype(np.float64))
        # the first index where the running sum reaches the uniform share of the total
        index = int(np.searchsorted(cumulative, cumulative[-1] * uniform, side="left"))
        return min(index, len(top) - 1)

    def probabilities(self, top: np.ndarray) -> np.ndarray:
        """The draw's distribution over `top` (what llama.cpp's dist sampler leaves in `p`)."""
        scaled = top / self._temperature
        weights = expf(scaled - scaled[0]).astype(np.float64)
        probabilities: np.ndarray = (weights / weights.sum()).astype(np.float32)
        return probabilities

    def _uniform(self) -> float:
        """std::uniform_real_distribution<double>(0, 1) on std::mt19937, as libstdc++ draws it
        (generate_canonical: two 32-bit outputs, the second the high part)."""
        low, high = self._bits.random_raw(2).tolist()
        value = (float(low) + float(high) * _TWO_32) / _TWO_64
        return value if value < 1.0 else _BELOW_ONE


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits' token ids and values, largest first; ties by token id. Only the
    logits within SPREAD of the largest are looked at, more when fewer than k are there."""
    peak = logits.max()
    spread = SPREAD
    while True:
        ids = np.flatnonzero(logits >= peak - spread)
        if ids.size >= k or math.isinf(spread):
            break
        spread = spread * 4 if spread < 1000 else math.inf
    values = logits[ids]
    if ids.size > k:
        kth = np.partition(values, ids.size - k)[ids.size - k]  # the kth largest
        above = np.flatnonzero(values > kth)
        ties = np.flatnonzero(values == kth)[: k - above.size]  # the lowest ids of the tied
        keep = np.sort(np.concatenate((above, ties)))
        ids, values = ids[keep], values[keep]
    order = np.argsort(-values, kind="stable")
    return ids[order], values[order]


def expf(x: np.ndarray) -> np.ndarray:
    """float32 exp, correctly rounded (computed in double): glibc's expf, which llama.cpp calls."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def mt19937(seed: int) -> np.random.MT19937:
    """std::mt19937(seed): numpy's legacy seeding of an int is the same init_genrand."""
    state = np.random.RandomState(seed).get_state(legacy=False)
    bits = np.random.MT19937()
    bits.state = {"bit_generator": "MT19937", "state": state["state"]}
    return bits
