"""GGUF models in-process through llama-cpp-python (`engine = "llamacpp"`)."""

from sluicegate.engines.llamacpp.bindings import install

install()  # before any module below imports llama_cpp: the bindings without `Llama` (bindings.py)

from sluicegate.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402

__all__ = ["LlamaCppEngine"]
