"""Server-side tools: what a tool provider (an MCP server, a plugin) offers the tool loop.

Providers list tools and run calls; they know nothing of dialects or of the loop. The loop
(`tools/loop.py`) decides which calls are server-side, runs them through these objects, and
feeds the outcomes back to the engine. Dialects only see the `ProviderInfo` of a call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from sluicegate.core.request import ToolSpec

ProviderType = Literal["plugin", "ephemeral_mcp"]


@dataclass(slots=True, frozen=True)
class ProviderInfo:
    """Who runs a tool: a plugin (configured MCP servers are the plugins `mcp/<name>`, as in LM
    Studio) or an MCP server given in the request itself."""

    type: ProviderType
    id: str  # plugin id ("mcp/<name>", "files") or the request's server_label
    server_label: str  # the Responses API's `server_label` for this provider

    def lmstudio(self) -> dict[str, str]:
        """LM Studio's `provider_info` object."""
        if self.type == "plugin":
            return {"type": "plugin", "plugin_id": self.id}
        return {"type": "ephemeral_mcp", "server_label": self.server_label}


@dataclass(slots=True)
class ServerTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    provider: ProviderInfo
    annotations: dict[str, Any] = field(default_factory=dict)

    def spec(self) -> ToolSpec:
        """As the engine sees it: an ordinary function tool."""
        return ToolSpec(self.name, self.description, self.input_schema)


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

    async def aclose(self) -> None:
        """Release connections and subprocesses."""
        return None
