"""Parsing the Responses API's MCP parts: `tools: [{type: "mcp", ...}]` and the MCP input items.

A `{type: "mcp"}` tool becomes an `McpServerParam`: where the server is (a `server_url`, or a
configured server named by its label), which of its tools the model may see, and which calls
need the client's approval first. The route turns these into the tool catalog's selection; the
approval policy is `needs_approval`, asked by the tool loop for each call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluicegate.core.ids import new_id
from sluicegate.core.request import ServerTool
from sluicegate.core.validation import Fields

Json = dict[str, Any]
MISSING = "missing_required_parameter"
MCP_ITEM_TYPES = ("mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response")
MCP_CALL_STATUSES = ("in_progress", "completed", "incomplete", "calling", "failed")


@dataclass(slots=True)
class ToolFilter:
    """`{tool_names, read_only}`: a tool matches when named, or read-only when `read_only`."""

    tool_names: list[str] = field(default_factory=list)
    read_only: bool = False

    def matches(self, tool: ServerTool) -> bool:
        return tool.name in self.tool_names or (self.read_only and bool(tool.annotations.get("readOnlyHint")))


@dataclass(slots=True)
class McpServerParam:
    """One `{type: "mcp"}` tool of a request."""

    server_label: str
    server_url: str | None = None  # None: the configured server `mcp/<server_label>`
    headers: dict[str, str] = field(default_factory=dict)
    allowed_tools: list[str] | None = None
    always: ToolFilter | None = None  # calls that need approval
    never: ToolFilter | None = None  # calls that do not
    # Calls matching neither filter: OpenAI's default is to ask ("always"); a policy that only
    # names `always` tools leaves the rest unasked.
    approve_by_default: bool = True

    def needs_approval(self, tool: ServerTool) -> bool:
        if self.never is not None and self.never.matches(tool):
            return False
        if self.always is not None and self.always.matches(tool):
            return True
        return self.approve_by_default


def approval_policy(servers: list[McpServerParam]) -> Callable[[ServerTool], bool]:
    """`needs_approval` for the tool loop: by the calling tool's server label. Tools of
    configured servers the request does not name never need approval."""
    by_label = {server.server_label: server for server in servers}

    def needs_approval(tool: ServerTool) -> bool:
        server = by_label.get(tool.provider.server_label)
        return server is not None and server.needs_approval(tool)

    return needs_approval


def parse_mcp_tool(t: Fields) -> tuple[McpServerParam, Json]:
    """The server, and the tool as echoed in the response object (headers left out: they are
    credentials, and responses are stored and listed)."""
    label = t.string("server_label", required=True) or ""
    if not label.strip():
        t.fail(
            "server_label",
            f"Invalid '{t.where('server_label')}': expected a non-empty string.",
            "invalid_value",
        )
    for unsupported in ("connector_id", "tunnel_id"):
        if t.has(unsupported):
            t.fail(
                unsupported,
                f"'{t.where(unsupported)}' is not supported by Sluicegate; give 'server_url', "
                "or a 'server_label' naming a configured MCP server.",
                "unsupported_parameter",
            )
    server = McpServerParam(server_label=label, server_url=t.string("server_url"))
    if server.server_url is not None and not server.server_url.startswith(("http://", "https://")):
        t.fail("server_url", f"Invalid '{t.where('server_url')}': expected an http(s) URL.", "invalid_value")
    headers = t.object("headers")
    if headers is not None:
        for key, value in headers.obj.items():
            if not isinstance(value, str):
                headers.fail(
                    key,
                    f"Invalid type for '{headers.where(key)}': header values must be strings.",
                    "invalid_type",
                )
        server.headers = dict(headers.obj)
    if (token := t.string("authorization")) is not None:
        server.headers["Authorization"] = f"Bearer {token}"
    server.allowed_tools = _allowed_tools(t)
    _require_approval(t, server)
    description = t.string("server_description")
    echo: Json = {
        "type": "mcp",
        "server_label": label,
        "server_url": server.server_url,
        "headers": None,
        "allowed_tools": t.obj.get("allowed_tools"),
        "require_approval": t.obj.get("require_approval", "always"),
    }
    if description is not None:
        echo["server_description"] = description
    return server, echo


def _names(f: Fields, key: str) -> list[str]:
    names = f.array(key) or []
    if not all(isinstance(name, str) for name in names):
        f.fail(key, f"Invalid '{f.where(key)}': expected an array of tool names (strings).")
    return names


def _allowed_tools(t: Fields) -> list[str] | None:
    raw = t.obj.get("allowed_tools")
    if raw is None:
        return None
    if isinstance(raw, list):
        return _names(t, "allowed_tools")
    f = t.object("allowed_tools")
    assert f is not None
    if f.boolean("read_only"):
        f.fail(
            "read_only",
            f"'{f.where('read_only')}' is not supported as a filter of allowed tools; list 'tool_names'.",
        )
    return _names(f, "tool_names") if f.has("tool_names") else None


def _filter(f: Fields, key: str) -> ToolFilter | None:
    sub = f.object(key)
    if sub is None:
        return None
    return ToolFilter(_names(sub, "tool_names"), bool(sub.boolean("read_only")))


def _require_approval(t: Fields, server: McpServerParam) -> None:
    raw = t.obj.get("require_approval")
    if raw is None or isinstance(raw, str):
        choice = t.string("require_approval", choices=("always", "never")) or "always"
        server.approve_by_default = choice == "always"
        return
    f = t.object("require_approval")
    assert f is not None
    server.always = _filter(f, "always")
    server.never = _filter(f, "never")
    server.approve_by_default = not (server.always is not None and server.never is None)


def parse_mcp_item(i: Fields, kind: str, item_id: str | None) -> Json:
    """An MCP input item (the output items of an earlier turn, or an approval answer)."""
    if kind == "mcp_approval_response":
        approve = i.boolean("approve")
        if approve is None:
            i.fail("approve", f"Missing required parameter: '{i.where('approve')}'.", MISSING)
        item: Json = {
            "type": kind,
            "id": item_id or new_id("mcpa_"),
            "approval_request_id": i.string("approval_request_id", required=True),
            "approve": approve,
        }
        if (reason := i.string("reason")) is not None:
            item["reason"] = reason
        return item
    label = i.string("server_label", required=True)
    if kind == "mcp_list_tools":
        tools = i.array("tools", required=True) or []
        for tool in i.items("tools", tools):
            tool.string("name", required=True)
        return {
            "type": kind,
            "id": item_id or new_id("mcpl_"),
            "server_label": label,
            "tools": tools,
            "error": i.string("error"),
        }
    common: Json = {
        "type": kind,
        "id": i.string("id", required=True) if kind == "mcp_call" else item_id or new_id("mcpr_"),
        "server_label": label,
        "name": i.string("name", required=True),
        "arguments": i.string("arguments", required=True),
    }
    if kind == "mcp_approval_request":
        return common
    error = i.obj.get("error")
    if error is not None and not isinstance(error, str | dict):
        i.fail("error", f"Invalid type for '{i.where('error')}': expected an object or a string.")
    return {
        **common,
        "output": i.string("output"),
        "error": error,
        "status": i.string("status", choices=MCP_CALL_STATUSES) or "completed",
        "approval_request_id": i.string("approval_request_id"),
    }
