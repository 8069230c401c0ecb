"""The [tools] table and mcp.json: defaults, parsing, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluicegate.config import Settings, load_settings
from sluicegate.core.errors import ConfigError
from sluicegate.tools.catalog import ToolCatalog
from sluicegate.tools.mcp_config import McpServerConfig, load_mcp_config, parse_mcp_config

SOURCE = Path("/etc/sluicegate/mcp.json")


def test_defaults() -> None:
    settings = Settings()
    assert settings.tools_mcp_config is None
    assert settings.tools_call_timeout_seconds == 60.0
    assert settings.tools_max_rounds == 25
    assert settings.tools_allow_request_servers is False
    assert settings.tools_allowed_hosts == []
    catalog = ToolCatalog.from_settings(settings)
    assert catalog.plugin_ids() == [] and catalog.max_rounds == 25


def test_tools_table(tmp_path: Path) -> None:
    config = tmp_path / "sluicegate.toml"
    config.write_text(
        "[tools]\n"
        'mcp_config = "conf/mcp.json"\n'
        "call_timeout_seconds = 5\n"
        "max_rounds = 3\n"
        "allow_request_servers = true\n"
        'allowed_hosts = ["127.0.0.1:9000", "10.0.0.0/8", "mcp.internal"]\n'
        "[tools.plugins.files]\n"
        'root = "."\n',
        encoding="utf-8",
    )
    settings = load_settings(config, env={})
    assert settings.tools_mcp_config == tmp_path / "conf" / "mcp.json"
    assert settings.tools_call_timeout_seconds == 5.0
    assert settings.tools_max_rounds == 3
    assert settings.tools_allow_request_servers is True
    assert settings.tools_allowed_hosts == ["127.0.0.1:9000", "10.0.0.0/8", "mcp.internal"]
    assert settings.tools_plugins == {"files": {"root": "."}}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("call_timeout_seconds = 0", "call_timeout_seconds must be a positive number"),
        ("max_rounds = 0", "max_rounds must be a positive integer"),
        ("max_rounds = true", "max_rounds must be a positive integer"),
        ('allow_request_servers = "yes"', "allow_request_servers must be true or false"),
        ('allowed_hosts = ["host:port"]', "bad port"),
        ("allowed_hosts = [1]", "allowed_hosts must be a list"),
        ("mcp_config = 3", "mcp_config must be the path"),
        ("plugins = 3", "[tools].plugins must hold one"),
        ("retries = 3", "[tools].retries is unknown"),
    ],
)
def test_bad_tools_settings(tmp_path: Path, line: str, message: str) -> None:
    config = tmp_path / "sluicegate.toml"
    config.write_text(f"[tools]\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, env={})
    assert message in str(raised.value)


def test_mcp_json_in_the_claude_desktop_format(tmp_path: Path) -> None:
    data = {
        "mcpServers": {
            "calc": {"command": "uvx", "args": ["mcp-calc"], "env": {"K": "v"}, "cwd": "srv"},
            "web": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "old": {
                "url": "http://127.0.0.1:9000/sse",
                "type": "sse",
                "timeout": 120,
                "allowed_tools": ["a"],
            },
            "typed": {"url": "http://h/mcp", "transport": "streamable-http", "autoApprove": ["x"]},
            "off": {"command": "x", "disabled": True},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    calc, web, old, typed = load_mcp_config(path)
    assert calc == McpServerConfig(
        "calc", "stdio", command="uvx", args=["mcp-calc"], env={"K": "v"}, cwd=tmp_path / "srv"
    )
    assert web == McpServerConfig(
        "web", "streamable_http", url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer x"}
    )
    assert (old.transport, old.timeout, old.allowed_tools) == ("sse", 120.0, ["a"])
    assert typed.transport == "streamable_http"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], 'expected an object with "mcpServers"'),
        ({"servers": {}}, 'expected an object with "mcpServers"'),
        ({"mcpServers": {"a b": {"command": "x"}}}, "server names are"),
        ({"mcpServers": {"a": "x"}}, "mcpServers.a must be an object"),
        ({"mcpServers": {"a": {}}}, 'give either "command" (stdio) or "url" (HTTP), not neither'),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "not both"),
        ({"mcpServers": {"a": {"command": ""}}}, "mcpServers.a.command must be a non-empty string"),
        ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "args must be a list of strings"),
        ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "env must be an object of string values"),
        ({"mcpServers": {"a": {"command": "x", "type": "sse"}}}, '"command" servers speak stdio'),
        ({"mcpServers": {"a": {"url": "ftp://h"}}}, "url must be an http:// or https:// URL"),
        ({"mcpServers": {"a": {"url": "http://h", "type": "stdio"}}}, "cannot use the stdio transport"),
        ({"mcpServers": {"a": {"url": "http://h", "type": "ws"}}}, "mcpServers.a.type must be one of"),
        ({"mcpServers": {"a": {"url": "http://h", "headers": []}}}, "headers must be an object"),
        ({"mcpServers": {"a": {"url": "http://h", "timeout": 0}}}, "timeout must be a positive number"),
        ({"mcpServers": {"a": {"url": "http://h", "allowed_tools": "x"}}}, "allowed_tools must be a list"),
    ],
)
def test_mcp_json_errors_name_the_key(data: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_mcp_config(data, SOURCE)
    assert str(SOURCE) in str(raised.value)
    assert message in str(raised.value)


def test_unreadable_or_invalid_mcp_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read MCP config"):
        load_mcp_config(tmp_path / "missing.json")
    broken = tmp_path / "mcp.json"
    broken.write_text('{"mcpServers": {', encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_mcp_config(broken)
    # The server refuses to start with it, before touching any MCP server.
    with pytest.raises(ConfigError, match="invalid JSON"):
        ToolCatalog.from_settings(Settings(tools_mcp_config=broken))
