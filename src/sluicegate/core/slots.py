"""llama-server's slots in the canonical request: `ChatRequest.extra[SLOT]` pins a generation to
one of the model's sequences (`id_slot`); an engine without addressable sequences ignores it."""

from __future__ import annotations

SLOT = "id_slot"
