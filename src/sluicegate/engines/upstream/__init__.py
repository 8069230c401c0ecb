"""Upstream engines: `openai` (Chat Completions) and `anthropic` (Messages) share base.py."""

from sluicegate.engines.upstream.anthropic_engine import AnthropicUpstreamEngine
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine

__all__ = ["AnthropicUpstreamEngine", "OpenAIUpstreamEngine"]
