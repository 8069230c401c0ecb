"""An engine whose sequences are addressable slots, as llama-server's are: their KV caches saved
to files, restored from them, or erased (`POST /slots/{id}?action=...`); and one with LoRA
adapters (`/lora-adapters`). The llamacpp engine is both; routes check for these protocols, so
other engines need nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

SlotKind = Literal["save", "restore", "erase"]


@dataclass(frozen=True, slots=True)
class SlotResult:
    tokens: int  # n_saved, n_restored or n_erased
    bytes: int  # n_written or n_read (0 for erase)
    ms: float


@runtime_checkable
class SlotStore(Protocol):
    def slot_count(self) -> int | None:
        """The addressable slots while loaded (None: not loaded, or none addressable)."""

    async def slot_action(self, slot: int, kind: SlotKind, path: Path | None) -> SlotResult:
        """Run `kind` on `slot` once it holds no sequence; `path`: the file (save, restore)."""


@runtime_checkable
class LoraStore(Protocol):
    """An engine with LoRA adapters loaded beside its model (llama-server's `/lora-adapters`)."""

    def lora_adapters(self) -> list[tuple[Path, float]]:
        """Each adapter's file and the scale requests without `lora` run with."""

    def set_lora_scales(self, body: object) -> None:
        """llama-server's `[{"id", "scale"}]` (an adapter left out at 0); a 400 when malformed."""
