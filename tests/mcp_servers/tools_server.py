"""A real MCP server for the tests, written with the SDK's server side (`MCPServer`, formerly FastMCP).

    python tests/mcp_servers/tools_server.py stdio [--prefix P]
    python tests/mcp_servers/tools_server.py http --port N [--prefix P]    # streamable HTTP at /mcp
    python tests/mcp_servers/tools_server.py sse --port N [--prefix P]     # legacy SSE at /sse

Every tool name starts with `--prefix` so two servers can be offered to the model side by side
without their names clashing (the fixtures run the HTTP one with the prefix `web_`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

# Exact texts the tests assert on.
FAIL_PREFIX = "tool failed on purpose: "
WEATHER = {"paris": "18°C, light rain", "tokyo": "24°C, clear"}


def build(prefix: str) -> MCPServer:
    server = MCPServer(f"sluicegate-test{('-' + prefix.rstrip('_')) if prefix else ''}", log_level="WARNING")

    @server.tool(name=prefix + "add", description="Add two integers and return the sum.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(name=prefix + "echo", description="Return the text unchanged.")
    def echo(text: str) -> str:
        return text

    @server.tool(name=prefix + "slow", description="Sleep for `seconds`, then say so.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}s"

    @server.tool(name=prefix + "fail", description="Fail with this message (an MCP `isError` result).")
    def fail(message: str) -> str:
        raise ToolError(FAIL_PREFIX + message)

    @server.tool(name=prefix + "crash", description="Kill the server process in the middle of the call.")
    def crash() -> str:
        sys.stdout.flush()
        os._exit(3)

    @server.tool(name=prefix + "get_weather", description="The current weather in a city.")
    def get_weather(
        city: Annotated[str, Field(description="City name, e.g. Paris", min_length=1)],
        unit: Annotated[str, Field(pattern="^(celsius|fahrenheit)$")] = "celsius",
    ) -> str:
        return f"{city}: {WEATHER.get(city.lower(), '20°C, cloudy')} ({unit})"

    @server.tool(name=prefix + "pid", description="The server's process id (tells restarts apart).")
    def pid() -> int:
        return os.getpid()

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()
    server = build(args.prefix)
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("sse", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
