"""How long a context a model loads with when the config does not say.

Agents send long prompts (Codex's first one is ~20k tokens), so the default is the context the
model was trained for — capped by a memory budget for its KV cache, which grows linearly with
the context: n_layer x n_head_kv x (k + v head dims) x 2 bytes per token.
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
    kv_bytes_per_token: int | None
    budget_mib: int

    def details(self) -> dict[str, Any]:
        """For the model listings."""
        return {
            "loaded": self.length,
            "source": self.source,
            "trained": self.trained,
            "kv_cache_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_bytes": self.length * self.kv_bytes_per_token if self.kv_bytes_per_token else None,
            "kv_cache_budget_mib": self.budget_mib,
        }

    def describe(self) -> str:
        """One line for the load log."""
        per_token = self.kv_bytes_per_token
        memory = f", KV cache {self.length * per_token / MIB:.0f} MiB" if per_token else ""
        why = {
            "config": "set by context_length",
            "trained": "the model's trained context",
            "budget": f"the trained {self.trained} capped by kv_cache_budget_mib = {self.budget_mib}",
            "default": "the header states no trained context",
        }[self.source]
        return f"context {self.length} tokens ({why}{memory})"


def choose_context(info: GGUFInfo, configured: int | None, budget_mib: int | None) -> ContextChoice:
    budget = budget_mib if budget_mib is not None else default_budget_mib()
    per_token = info.kv_bytes_per_token
    trained = info.context_length
    if configured is not None:
        return ContextChoice(configured, "config", trained, per_token, budget)
    wanted = trained or FALLBACK_CONTEXT
    if per_token:
        affordable = budget * MIB // per_token // 256 * 256
        if affordable < wanted:
            return ContextChoice(
                max(affordable, min(MIN_BUDGET_CONTEXT, wanted)), "budget", trained, per_token, budget
            )
    return ContextChoice(wanted, "trained" if trained else "default", trained, per_token, budget)
