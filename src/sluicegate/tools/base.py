"""Server-side tools: what a tool provider (an MCP server, a plugin) offers the tool loop.

Providers list tools and run calls; they know nothing of dialects or of the loop. The loop
(`tools/loop.py`) decides which calls are server-side, runs them through these objects, and
feeds the outcomes back to the engine. Dialects only see the `ProviderInfo` of a call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from sluicegate.core.request import ProviderInfo, ServerTool

__all__ = ["ProviderInfo", "ServerTool", "ToolOutcome", "ToolProvider", "ToolProviderError"]


@dataclass(slots=True)
class ToolOutcome:
    """The text the model is given back, and an error when the call did not succeed (the tool
    raised, timed out, its server died, the arguments failed its schema)."""

    output: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ToolProviderError(Exception):
    """A provider cannot list its tools (server down, refused, misconfigured)."""


class ToolProvider(ABC):
    """One source of server-side tools."""

    info: ProviderInfo

    @abstractmethod
    async def list_tools(self) -> list[ServerTool]:
        """The tools on offer (cached by the provider as it sees fit); raises ToolProviderError."""

    @abstractmethod
    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one call. Tool failures, timeouts and dead servers come back as an outcome with
        `error` set; this only raises on cancellation."""

    def start(self) -> None:
        """At server start, for a configured provider: begin any background work (on the loop)."""
        return None

    async def aclose(self) -> None:
        """Release connections and subprocesses."""
        return None
