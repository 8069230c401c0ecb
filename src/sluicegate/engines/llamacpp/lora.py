"""LoRA adapters loaded beside the model (the model's `lora` key), as llama-server's `--lora`:
each a GGUF of `general.type = "adapter"` read with llama.cpp's `llama_adapter_lora_init`, and
applied to the context with `llama_set_adapters_lora` at a scale per adapter.

The scales are per request (llama-server's `lora: [{"id", "scale"}]`, an adapter left out at 0),
else the model's current ones (`POST /lora-adapters` sets them). llama.cpp applies adapters to
the whole context, so the scheduler decodes only the sequences that share one set of scales in a
step, and a slot's cache is reused only under the scales it was computed with (scheduler.py).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from sluicegate.core.errors import ConfigError, EngineFailure, invalid

Scales = tuple[float, ...]
MAX_SCALE = 1000.0  # far beyond any use (llama-server takes any float); keeps NaN and inf out


@dataclass(frozen=True, slots=True)
class LoraFile:
    path: Path
    scale: float = 1.0


def parse_lora(model: str, value: Any, base_dir: Path) -> tuple[LoraFile, ...]:
    """`lora = ["a.gguf", ...]` or `[{path = "a.gguf", scale = 0.5}, ...]` (paths relative to the
    config file)."""
    if not isinstance(value, list):
        raise ConfigError(f"model {model!r}: `lora` must be a list of GGUF paths or {{path, scale}} tables")
    files = []
    for entry in value:
        table = {"path": entry} if isinstance(entry, str) else entry
        if (
            not isinstance(table, dict)
            or set(table) - {"path", "scale"}
            or not isinstance(table.get("path"), str)
        ):
            raise ConfigError(
                f"model {model!r}: each `lora` entry is a path or {{path, scale}}, got {entry!r}"
            )
        scale = table.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not abs(scale) <= MAX_SCALE:
            raise ConfigError(f"model {model!r}: a `lora` scale must be a number, got {scale!r}")
        path = Path(table["path"]).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise ConfigError(f"model {model!r}: no LoRA GGUF file at {path}")
        files.append(LoraFile(path, float(scale)))
    return tuple(files)


def parse_scales(value: Any, count: int, param: str = "lora") -> Scales:
    """llama-server's `[{"id": 0, "scale": 0.5}, ...]`: every adapter it leaves out at 0."""
    if not isinstance(value, list):
        raise invalid(f'"{param}" must be an array of {{"id", "scale"}} objects', param=param)
    scales = [0.0] * count
    for entry in value:
        if not isinstance(entry, dict):
            raise invalid(f'"{param}" must be an array of {{"id", "scale"}} objects', param=param)
        index, scale = entry.get("id"), entry.get("scale", 0.0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise invalid(f"Invalid LoRA adapter id {index!r}: this model has {count} adapters", param=param)
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not abs(scale) <= MAX_SCALE:
            raise invalid(f"A LoRA scale must be a number, got {scale!r}", param=param)
        scales[index] = float(scale)
    return tuple(scales)


class Adapters:
    """The loaded adapters of one context; worker thread only (`apply` runs before a decode)."""

    def __init__(self, model: Any, files: tuple[LoraFile, ...]) -> None:
        self._pointers: list[Any] = []
        try:
            for file in files:
                pointer = llama_cpp.llama_adapter_lora_init(model, str(file.path).encode())
                if not pointer:
                    raise EngineFailure(
                        f"llama.cpp could not load the LoRA adapter {file.path}", code="model_load_failed"
                    )
                self._pointers.append(pointer)
        except BaseException:
            self.close()
            raise
        self._applied: Scales | None = None

    def apply(self, ctx: Any, scales: Scales) -> bool:
        """Set the context's adapters to these scales; False when they already were."""
        if scales == self._applied:
            return False
        on = [(p, s) for p, s in zip(self._pointers, scales, strict=True) if s != 0.0]  # 0: off
        array = (llama_cpp.llama_adapter_lora_p_ctypes * max(1, len(on)))(*(p for p, _ in on))
        values = (ctypes.c_float * max(1, len(on)))(*(s for _, s in on))
        if llama_cpp.llama_set_adapters_lora(ctx, array, len(on), values) != 0:
            raise EngineFailure("llama.cpp could not set the LoRA adapters", code="decode_failed")
        self._applied = scales
        return True

    def close(self) -> None:
        for pointer in self._pointers:
            llama_cpp.llama_adapter_lora_free(pointer)
        self._pointers.clear()
