"""The quantization names of gguf_types.py are the installed `gguf` package's own."""

from __future__ import annotations

import gguf

from sluicegate.engines.llamacpp.gguf_types import FILE_TYPES, TENSOR_TYPES


def test_the_file_types_are_gguf_s() -> None:
    assert {t.value: t.name for t in gguf.LlamaFileType} == FILE_TYPES


def test_the_tensor_types_are_gguf_s() -> None:
    assert {t.value: t.name for t in gguf.GGMLQuantizationType} == TENSOR_TYPES
