"""Real MCP servers for the tests: start, kill and restart them, and write an `mcp.json` naming them.

Import what you need (`from mcp_fixtures import mcp_http_server, mcp_json`); pytest's
`pythonpath` setting puts this folder on `sys.path`. The servers are
`tests/mcp_servers/tools_server.py`, written with the `mcp` SDK's own server side:

- `calc` runs over stdio (spawned by whoever connects): tools `add`, `echo`, `slow`, `fail`,
  `crash`, `get_weather`, `pid`;
- `web` runs over streamable HTTP on a free loopback port (a subprocess owned by the fixture): the
  same tools prefixed `web_` (`web_add`, ...), so both can be offered to one model.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TOOLS_SERVER = Path(__file__).parent / "mcp_servers" / "tools_server.py"
HTTP_PREFIX = "web_"
TOOL_NAMES = ["add", "echo", "slow", "fail", "crash", "get_weather", "pid"]
FAIL_PREFIX = "tool failed on purpose: "  # what `fail(message)` answers, before the message
STARTUP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stdio_entry(prefix: str = "", **extra: Any) -> dict[str, Any]:
    """An `mcpServers` entry that spawns the test server over stdio."""
    args = [str(TOOLS_SERVER), "stdio"] + (["--prefix", prefix] if prefix else [])
    return {"command": sys.executable, "args": args, **extra}


class HttpMcpServer:
    """The test server over streamable HTTP (or legacy SSE) as a subprocess on a fixed loopback
    port, so it can be killed and restarted where clients expect it."""

    def __init__(self, folder: Path, prefix: str = HTTP_PREFIX, transport: str = "http") -> None:
        self.port = free_port()
        self.prefix = prefix
        self.transport = transport
        self.log_path = folder / f"mcp-{transport}-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    def entry(self, **extra: Any) -> dict[str, Any]:
        """An `mcpServers` entry pointing at this server."""
        entry: dict[str, Any] = {"url": self.url}
        if self.transport == "sse":
            entry["type"] = "sse"
        return {**entry, **extra}

    def start(self) -> None:
        command = [sys.executable, str(TOOLS_SERVER), self.transport, "--port", str(self.port)]
        command += ["--prefix", self.prefix] if self.prefix else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"MCP test server exited: {self.log_path.read_text(errors='replace')}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"MCP test server did not listen on {self.port} within {STARTUP_TIMEOUT}s")

    def kill(self) -> None:
        """Kill it hard (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        """Kill it if running (e.g. after `web_crash`), then start it again on the same port."""
        self.kill()
        self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def write_mcp_json(folder: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}, indent=2), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mcp_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    """The streamable HTTP test server (tools `web_*`), one per test module."""
    server = HttpMcpServer(tmp_path_factory.mktemp("mcp-http"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mcp_json(tmp_path_factory: pytest.TempPathFactory, mcp_http_server: HttpMcpServer) -> Path:
    """An `mcp.json` with `calc` (stdio) and `web` (the module's HTTP server)."""
    folder = tmp_path_factory.mktemp("mcp-config")
    return write_mcp_json(folder, {"calc": stdio_entry(), "web": mcp_http_server.entry()})
