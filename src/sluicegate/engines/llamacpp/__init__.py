"""GGUF models in-process through llama-cpp-python (`engine = "llamacpp"`)."""

from sluicegate.engines.llamacpp.engine import LlamaCppEngine

__all__ = ["LlamaCppEngine"]
