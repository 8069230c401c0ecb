"""llama-server's slots and LoRA scales in the canonical request: `ChatRequest.extra[SLOT]` pins a generation to
one of the model's sequences (`id_slot`); an engine without addressable sequences ignores it."""

from __future__ import annotations

SLOT = "id_slot"
# llama-server's per-request LoRA scales (`lora: [{"id", "scale"}]`), as the request gave them:
# the engine that loaded the adapters reads them (an adapter left out is at 0).
LORA = "lora"
# llama-server's `n_keep`: the prompt tokens a context shift keeps (-1: the whole prompt), for an
# engine whose model has `context_shift` on.
N_KEEP = "n_keep"
