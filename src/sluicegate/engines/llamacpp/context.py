"""How long a context a model loads with when the config does not say, and what its KV cache takes.

Agents send long prompts (Codex's first one is ~20k tokens), so the default is the context the
model was trained for — capped by a memory budget for its KV cache. That cache is sized as
llama.cpp sizes it (`kv_cache_bytes`): n_head_kv x (k + v head dims) x 2 bytes per layer and
cell, a full-attention layer with the context's cells, a sliding-window one with the window's
plus a batch (the engine loads with `swa_full = false`), and one stream of cells per sequence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from sluicegate.engines.llamacpp.gguf_info import GGUFInfo

MIB = 1 << 20
# The KV-cache budget when the config gives none: 4 GiB, or a quarter of the machine's memory
# if that is less. Qwen3-4B (~144 KiB/token) then gets ~29k tokens, Llama-3.1-8B ~32k.
DEFAULT_BUDGET_MIB = 4096
# The context of a model whose header states none.
FALLBACK_CONTEXT = 8192
# Never below this because of the budget (a model trained for less keeps its own).
MIN_BUDGET_CONTEXT = 2048
CELL_PAD = 256  # llama.cpp rounds a stream's (and a windowed cache's) cells up to this
DEFAULT_UBATCH = 512


def _pad(cells: int) -> int:
    return -(-cells // CELL_PAD) * CELL_PAD


def kv_cache_bytes(
    info: GGUFInfo,
    context_length: int,
    *,
    sequences: int = 1,
    n_ubatch: int = DEFAULT_UBATCH,
    unified: bool = False,
) -> int | None:
    """The KV cache llama.cpp allocates for `sequences` of `context_length` tokens each (None
    when the header does not give its shape): `llama_kv_cache_iswa`'s sizes. Per stream (one
    per sequence, or one for all with a unified cache), full-attention layers hold the
    stream's cells, windowed ones `window (x sequences when unified) + n_ubatch`, at most the
    stream's, both rounded up to 256 cells."""
    per_cell = info.kv_bytes_per_cell
    if per_cell is None or info.n_layers is None:
        return None
    streams = 1 if unified else sequences
    cells = _pad(context_length * sequences if unified else context_length)
    windowed = 0
    if info.swa_layers:
        windowed = _pad(min(cells, info.sliding_window * (sequences if unified else 1) + n_ubatch))
    full_layers = info.n_layers - info.swa_layers
    return streams * per_cell * (full_layers * cells + info.swa_layers * windowed)


def default_budget_mib() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_BUDGET_MIB
    return max(min(DEFAULT_BUDGET_MIB, total // 4 // MIB), 256)


@dataclass(frozen=True, slots=True)
class ContextChoice:
    length: int
    source: Literal["config", "trained", "budget", "default"]
    trained: int | None
    kv_bytes_per_token: int | None  # every layer's: a token within the window
    budget_mib: int
    info: GGUFInfo | None = None  # the KV cache's shape

    def cache_bytes(self, sequences: int = 1, n_ubatch: int = DEFAULT_UBATCH) -> int | None:
        """The KV cache of a load with this context and `sequences` (one stream each)."""
        if self.info is None:
            return None
        return kv_cache_bytes(self.info, self.length, sequences=sequences, n_ubatch=n_ubatch)

    def details(self, sequences: int = 1, n_ubatch: int = DEFAULT_UBATCH) -> dict[str, Any]:
        """For the model listings."""
        return {
            "loaded": self.length,
            "source": self.source,
            "trained": self.trained,
            "kv_cache_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_bytes": self.cache_bytes(sequences, n_ubatch),
            "kv_cache_budget_mib": self.budget_mib,
        }

    def describe(self, sequences: int = 1, n_ubatch: int = DEFAULT_UBATCH) -> str:
        """One line for the load log."""
        size = self.cache_bytes(sequences, n_ubatch)
        memory = f", KV cache {size / MIB:.0f} MiB" if size else ""
        why = {
            "config": "set by context_length",
            "trained": "the model's trained context",
            "budget": f"the trained {self.trained} capped by kv_cache_budget_mib = {self.budget_mib}",
            "default": "the header states no trained context",
        }[self.source]
        return f"context {self.length} tokens ({why}{memory})"


def _affordable(info: GGUFInfo, budget_bytes: int, wanted: int) -> int:
    """The longest context (a multiple of 256, at most `wanted`) whose one-sequence KV cache
    fits the budget: the cache only grows with the context, so a bisection finds it."""
    low, high = 0, wanted // CELL_PAD
    while low < high:
        middle = (low + high + 1) // 2
        size = kv_cache_bytes(info, middle * CELL_PAD)
        if size is not None and size <= budget_bytes:
            low = middle
        else:
            high = middle - 1
    return low * CELL_PAD


def choose_context(info: GGUFInfo, configured: int | None, budget_mib: int | None) -> ContextChoice:
    budget = budget_mib if budget_mib is not None else default_budget_mib()
    per_token = info.kv_bytes_per_token
    trained = info.context_length
    if configured is not None:
        return ContextChoice(configured, "config", trained, per_token, budget, info)
    wanted = trained or FALLBACK_CONTEXT
    if per_token:
        affordable = _affordable(info, budget * MIB, wanted)
        if affordable < wanted:
            return ContextChoice(
                max(affordable, min(MIN_BUDGET_CONTEXT, wanted)), "budget", trained, per_token, budget, info
            )
    return ContextChoice(wanted, "trained" if trained else "default", trained, per_token, budget, info)
