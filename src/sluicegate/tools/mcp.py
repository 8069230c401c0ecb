"""MCP servers as tool providers: configured ones (the plugins `mcp/<name>`) and per-request ones.

A provider keeps one long-lived session (`McpConnection`) and its tool list. Configured servers
are discovered at startup and refreshed in the background; a dead server is reported in listings
and outcomes, retried with backoff, and picked up again when it comes back. A call on a session
that turns out to be dead reconnects and is resent once, but only when the request certainly
never reached a server; a server that dies mid-call gets a failure outcome (the tool may have
had effects) and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx2
import orjson
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    PaginatedRequestParams,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from sluicegate.tools.base import ProviderInfo, ServerTool, ToolOutcome, ToolProvider, ToolProviderError
from sluicegate.tools.mcp_config import McpServerConfig
from sluicegate.tools.mcp_session import (
    McpConnection,
    McpConnectionError,
    McpTimeout,
    TransportFactory,
    describe,
)
from sluicegate.tools.pinned import PinnedTransport
from sluicegate.tools.ssrf import Target

log = logging.getLogger(__name__)
logging.getLogger("httpx2").setLevel(logging.WARNING)  # the SDK's HTTP client logs every request at INFO

T = TypeVar("T")

CONNECT_TIMEOUT = 20.0  # connect + handshake, and listing tools
REFRESH_SECONDS = 300.0  # tool lists of healthy servers are re-read this often
RETRY_MIN_SECONDS, RETRY_MAX_SECONDS = 5.0, 300.0  # a dead server is retried with backoff
LIST_RETRY_SECONDS = 5.0  # a listing does not reconnect to a server that failed this recently
MAX_PAGES = 50
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def stdio_transport(config: McpServerConfig) -> TransportFactory:
    params = StdioServerParameters(command=config.command, args=config.args, env=config.env, cwd=config.cwd)
    return lambda: stdio_client(params)


def http_transport(
    url: str, headers: dict[str, str], *, sse: bool = False, pinned: Target | None = None
) -> TransportFactory:
    """Streamable HTTP (or legacy SSE) with our own headers, pinned to a checked address if given."""

    def client(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        transport = PinnedTransport(pinned) if pinned is not None else None
        return httpx2.AsyncClient(
            headers=headers, timeout=timeout or HTTP_TIMEOUT, auth=auth, transport=transport
        )

    @contextlib.asynccontextmanager
    async def streamable() -> AsyncIterator[Any]:
        async with client(headers) as http, streamable_http_client(url, http_client=http) as streams:
            yield streams

    if sse:
        return lambda: sse_client(url, headers=headers, httpx_client_factory=client)
    return streamable


class McpProvider(ToolProvider):
    def __init__(
        self,
        info: ProviderInfo,
        transport: TransportFactory,
        *,
        call_timeout: float,
        allowed_tools: list[str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.info = info
        self.call_timeout = call_timeout
        self.allowed_tools = None if allowed_tools is None else set(allowed_tools)
        self._transport = transport
        self._connect_timeout = connect_timeout
        self._connection: McpConnection | None = None
        self._lock = asyncio.Lock()
        self._tools: list[ServerTool] | None = None
        self._error: str | None = None
        self._error_at = 0.0
        self._refresher: asyncio.Task[None] | None = None

    @classmethod
    def from_config(cls, config: McpServerConfig, call_timeout: float) -> McpProvider:
        if config.transport == "stdio":
            transport = stdio_transport(config)
        else:
            transport = http_transport(config.url, config.headers, sse=config.transport == "sse")
        info = ProviderInfo("plugin", f"mcp/{config.name}", config.name)
        return cls(
            info, transport, call_timeout=config.timeout or call_timeout, allowed_tools=config.allowed_tools
        )

    @property
    def label(self) -> str:
        return self.info.server_label

    def start(self) -> None:
        """Discover now and keep the list fresh in the background (configured servers)."""
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever(), name=f"mcp-refresh:{self.label}")

    async def list_tools(self) -> list[ServerTool]:
        if self._tools is not None:
            return list(self._tools)
        connected = self._connection is not None and self._connection.alive
        if (
            self._error is not None
            and not connected
            and time.monotonic() - self._error_at < LIST_RETRY_SECONDS
        ):
            raise ToolProviderError(self._error)
        try:
            return await self._discover()
        except Exception as exc:
            raise ToolProviderError(self._record_failure(exc)) from exc

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            result = await self._in_session(
                lambda client: client.call_tool(name, arguments), self.call_timeout
            )
        except McpTimeout:
            message = f"the tool '{name}' did not answer within {self.call_timeout:g} seconds"
            return ToolOutcome(f"Error: {message}; it was cancelled.", error=message)
        except McpConnectionError as exc:
            return _failure(name, str(exc))
        except MCPError as exc:  # a protocol-level error: unknown tool, invalid params, ...
            return _failure(name, f"MCP server '{self.label}' answered with an error: {exc.message}")
        except Exception as exc:  # e.g. a malformed result from the server
            return _failure(name, f"MCP server '{self.label}' failed: {describe(exc)}")
        return outcome_of(result)

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        async with self._lock:
            if self._connection is not None:
                await self._connection.aclose()
                self._connection = None

    # --- internals -------------------------------------------------------------------------

    async def _session(self) -> McpConnection:
        async with self._lock:
            if self._connection is not None and self._connection.alive:
                return self._connection
            if self._connection is not None:
                await self._connection.aclose()
                self._connection = None
            connection = McpConnection(self.label, self._transport)
            await connection.open(self._connect_timeout)
            self._connection = connection
            return connection

    async def _in_session(
        self, job: Callable[[Client], Awaitable[T]], timeout: float, *, idempotent: bool = False
    ) -> T:
        """Run `job` in a live session, reconnecting first if needed; resent once on a fresh
        session when it is idempotent or the first attempt certainly never reached the server."""
        for attempt in (1, 2):
            connection = await self._session()
            try:
                return await connection.run(job, timeout)
            except McpConnectionError as exc:
                if (exc.delivered and not idempotent) or attempt == 2:
                    raise
                log.info("MCP server '%s': session lost (%s); reconnecting", self.label, exc)
        raise AssertionError("unreachable")

    async def _discover(self) -> list[ServerTool]:
        tools = await self._in_session(_list_all_tools, self._connect_timeout, idempotent=True)
        listed = [self._server_tool(tool) for tool in tools]
        self._tools = [t for t in listed if self.allowed_tools is None or t.name in self.allowed_tools]
        self._error = None
        return list(self._tools)

    def _record_failure(self, exc: BaseException) -> str:
        self._tools = None
        self._error = f"MCP server '{self.label}' is unavailable: {describe(exc)}"
        self._error_at = time.monotonic()
        return self._error

    async def _refresh_forever(self) -> None:
        delay, healthy = RETRY_MIN_SECONDS, None
        while True:
            try:
                tools = await self._discover()
            except Exception as exc:
                error = self._record_failure(exc)
                if healthy is not False:
                    log.warning("%s (retrying in the background)", error)
                healthy, wait = False, delay
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            else:
                if healthy is not True:
                    names = ", ".join(t.name for t in tools) or "none"
                    log.info(
                        "MCP server '%s' (%s): %d tools: %s", self.label, self.info.id, len(tools), names
                    )
                healthy, wait, delay = True, REFRESH_SECONDS, RETRY_MIN_SECONDS
            await asyncio.sleep(wait)

    def _server_tool(self, tool: Tool) -> ServerTool:
        annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else {}
        return ServerTool(tool.name, tool.description or "", dict(tool.input_schema), self.info, annotations)


async def _list_all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _failure(name: str, message: str) -> ToolOutcome:
    return ToolOutcome(f"Error: the tool '{name}' could not run: {message}", error=message)


def outcome_of(result: CallToolResult) -> ToolOutcome:
    """An MCP result as text for the model: text blocks joined, other blocks described."""
    parts = [_describe_block(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = orjson.dumps(result.structured_content).decode()
    if result.is_error:
        return ToolOutcome(
            text or "Error: the tool reported an error.", error=text or "the tool reported an error"
        )
    return ToolOutcome(text)


def _describe_block(block: Any) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return resource.text
        return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"
