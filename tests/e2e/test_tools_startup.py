"""`sluicegate serve` with MCP servers and a plugin configured: it logs what it found, and a dead
server does not stop it from serving."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import poll, run_server, scripted, write_config

from mcp_fixtures import free_port, stdio_entry, write_mcp_json

pytestmark = pytest.mark.e2e


def test_serve_logs_discovered_servers_and_survives_a_dead_one(tmp_path: Path) -> None:
    write_mcp_json(tmp_path, {"calc": stdio_entry(), "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp"}})
    (tmp_path / "shared").mkdir()
    config = write_config(
        tmp_path,
        {},
        [scripted("chat", "chat.yaml")],
        {"tools": {"mcp_config": "mcp.json"}, "tools.plugins.files": {"root": "shared"}},
    )
    with run_server(tmp_path, config) as server:
        found = "MCP server 'calc' (mcp/calc): 7 tools: add, echo, slow, fail, crash, get_weather, pid"
        poll(lambda: found in server.output(), 30, fail=True)
        poll(lambda: "MCP server 'gone' is unavailable" in server.output(), 30, fail=True)
        assert "plugin 'files' enabled" in server.output()
        assert server.process.poll() is None


def test_a_broken_mcp_json_stops_startup_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {"url": "ftp://nope"}}}', encoding="utf-8")
    config = write_config(
        tmp_path, {}, [scripted("chat", "chat.yaml")], {"tools": {"mcp_config": "mcp.json"}}
    )
    with pytest.raises(RuntimeError) as raised, run_server(tmp_path, config):
        pass
    assert "mcpServers.x.url must be an http:// or https:// URL" in str(raised.value)
