"""A server with real MCP tools for the tool-loop e2e tests: `calc` (stdio) and `web` (streamable
HTTP, the module's server from `mcp_fixtures`) from an mcp.json, the `files` plugin on a folder,
per-request servers allowed for 127.0.0.1 only, and the scripted model `tools` (scripts/tools.yaml).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from e2e_support import Server, scripted

from mcp_fixtures import HttpMcpServer, stdio_entry, write_mcp_json

StartServer = Callable[..., Server]
MODEL = "tools"
MAX_ROUNDS = 3
WEB_TIMEOUT_SECONDS = 3  # the `web` server's per-call timeout (its `slow` tool sleeps longer)
NOTES = "Sluicegate's tests start real mcp_servers.\n"


def start_tools_server(
    start_server: StartServer, http: HttpMcpServer, folder: Path, **server: object
) -> Server:
    shared = folder / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "notes.txt").write_text(NOTES, encoding="utf-8")
    mcp_json = write_mcp_json(folder, {"calc": stdio_entry(), "web": http.entry(timeout=WEB_TIMEOUT_SECONDS)})
    tables = {
        "tools": {
            "mcp_config": str(mcp_json),
            "max_rounds": MAX_ROUNDS,
            "allow_request_servers": True,
            "allowed_hosts": ["127.0.0.1"],
        },
        "tools.plugins.files": {"root": str(shared)},
    }
    return start_server(dict(server), [scripted(MODEL, "tools.yaml")], tables)


@pytest.fixture(scope="module")
def tools_server(
    start_server: StartServer, mcp_http_server: HttpMcpServer, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    server = start_tools_server(start_server, mcp_http_server, tmp_path_factory.mktemp("tools"))
    response = httpx.post(server.base_url + "/api/v1/models/load", json={"model": MODEL}, timeout=30)
    assert response.status_code == 200, response.text  # no model_load events in the tests' streams
    return server
