"""The `openai` engine: an OpenAI-compatible upstream behind Sluicegate (see engine.py)."""

from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine

__all__ = ["OpenAIUpstreamEngine"]
