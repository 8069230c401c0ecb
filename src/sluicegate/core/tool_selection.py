"""Which server-side tool providers a request picks, as the dialects parse it.

Here rather than in `tools/` because the dialects write it and the tools read it, and the two
are independent layers (docs/architecture.md, "Layering").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PluginChoice:
    """LM Studio integrations: "mcp/x" or {type: "plugin", id, allowed_tools}."""

    id: str
    allowed_tools: list[str] | None = None


@dataclass
class RequestServer:
    """Responses {type: "mcp", ...} / LM Studio {type: "ephemeral_mcp", ...}."""

    server_label: str
    server_url: str
    headers: dict[str, str] = field(default_factory=dict)
    allowed_tools: list[str] | None = None


@dataclass
class ToolSelection:
    plugins: list[PluginChoice] = field(default_factory=list)
    servers: list[RequestServer] = field(default_factory=list)
    all_configured: bool = False  # every configured provider (MCP servers and enabled plugins)
