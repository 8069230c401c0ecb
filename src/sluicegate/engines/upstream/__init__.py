"""Upstream engines: `openai` (Chat Completions) and `anthropic` (Messages) share base.py.

The engine classes are imported when first asked for (the entry points name them here): a
server that serves only local models does not hold the upstream engines' modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluicegate.engines.upstream.anthropic_engine import AnthropicUpstreamEngine
    from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine

_MODULES = {
    "AnthropicUpstreamEngine": "sluicegate.engines.upstream.anthropic_engine",
    "OpenAIUpstreamEngine": "sluicegate.engines.upstream.engine",
}

__all__ = ["AnthropicUpstreamEngine", "OpenAIUpstreamEngine"]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
