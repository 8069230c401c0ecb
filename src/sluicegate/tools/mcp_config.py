"""`mcp.json`: the MCP servers an operator configured, in the Claude Desktop format.

```json
{"mcpServers": {
  "calc": {"command": "uvx", "args": ["mcp-calc"], "env": {"KEY": "v"}, "cwd": "servers"},
  "web":  {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
  "old":  {"url": "http://127.0.0.1:9000/sse", "type": "sse", "timeout": 120,
           "allowed_tools": ["search"]}
}}
```

A `url` speaks streamable HTTP unless `type` (or `transport`) says `sse`. `timeout` (seconds)
overrides `[tools] call_timeout_seconds` for that server; `allowed_tools` limits what it offers.
Keys other clients add (`disabled`, `autoApprove`, ...) are tolerated; `disabled: true` skips
the server. Stdio servers exist only here: a request can never start a process.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sluicegate.core.errors import ConfigError

Transport = Literal["stdio", "streamable_http", "sse"]

_TRANSPORTS: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "streamable_http",
    "streamable_http": "streamable_http",
    "streamable-http": "streamable_http",
    "streamablehttp": "streamable_http",
    "sse": "sse",
}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    transport: Transport
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: Path | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # per-call seconds; None: [tools] call_timeout_seconds
    allowed_tools: list[str] | None = None


def load_mcp_config(path: Path) -> list[McpServerConfig]:
    """The enabled servers of an `mcp.json`; ConfigError names the file and the offending key."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read MCP config {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    return parse_mcp_config(data, path)


def parse_mcp_config(data: Any, path: Path) -> list[McpServerConfig]:
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ConfigError(f'{path}: expected an object with "mcpServers": {{"<name>": {{...}}}}')
    servers = []
    for name, entry in data["mcpServers"].items():
        where = f"{path}: mcpServers.{name}"
        if not NAME_PATTERN.match(name):
            raise ConfigError(f"{where}: server names are 1-64 letters, digits, '_', '.' or '-'")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be an object")
        if entry.get("disabled") is True:
            continue
        servers.append(_parse_server(name, entry, where, path.parent))
    return servers


def _parse_server(name: str, entry: dict[str, Any], where: str, base_dir: Path) -> McpServerConfig:
    hint = entry.get("type", entry.get("transport"))
    if hint is not None and (not isinstance(hint, str) or hint.lower() not in _TRANSPORTS):
        raise ConfigError(f"{where}.type must be one of {sorted(set(_TRANSPORTS))}, got {hint!r}")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ConfigError(
            f'{where}: give either "command" (stdio) or "url" (HTTP), not {"both" if has_url else "neither"}'
        )
    timeout = entry.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ConfigError(f"{where}.timeout must be a positive number of seconds")
    allowed = entry.get("allowed_tools")
    if allowed is not None and not _is_str_list(allowed):
        raise ConfigError(f"{where}.allowed_tools must be a list of tool names")
    common: dict[str, Any] = {
        "name": name,
        "timeout": float(timeout) if timeout is not None else None,
        "allowed_tools": list(allowed) if allowed is not None else None,
    }
    if has_command:
        if hint is not None and _TRANSPORTS[hint.lower()] != "stdio":
            raise ConfigError(f'{where}: "command" servers speak stdio, not {hint!r}')
        command, args, env, cwd = entry["command"], entry.get("args", []), entry.get("env"), entry.get("cwd")
        if not isinstance(command, str) or not command:
            raise ConfigError(f"{where}.command must be a non-empty string")
        if not _is_str_list(args):
            raise ConfigError(f"{where}.args must be a list of strings")
        if env is not None and not _is_str_dict(env):
            raise ConfigError(f"{where}.env must be an object of string values")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise ConfigError(f"{where}.cwd must be a path")
        folder = None if cwd is None else base_dir / Path(cwd).expanduser()
        return McpServerConfig(
            transport="stdio", command=command, args=list(args), env=env, cwd=folder, **common
        )
    url, headers = entry["url"], entry.get("headers", {})
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url must be an http:// or https:// URL")
    if not _is_str_dict(headers):
        raise ConfigError(f"{where}.headers must be an object of string values")
    transport = "streamable_http" if hint is None else _TRANSPORTS[hint.lower()]
    if transport == "stdio":
        raise ConfigError(f'{where}: a "url" server cannot use the stdio transport')
    return McpServerConfig(transport=transport, url=url, headers=dict(headers), **common)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_str_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
