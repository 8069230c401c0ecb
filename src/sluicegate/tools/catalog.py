"""What tools a request gets: the catalog of configured providers, and one request's `ToolSet`.

Configured MCP servers are the plugins `mcp/<name>` (as in LM Studio) with `server_label` `<name>`;
Python plugins keep their own id. A request picks providers (`ToolSelection`): plugin ids, MCP
servers given by URL (request-scoped sessions, closed with the ToolSet; off unless enabled, and
SSRF-checked), or everything configured (Chat Completions, Responses). Tool names form one flat
namespace for the model: on a clash the provider chosen first keeps the name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson

from sluicegate.config import Settings
from sluicegate.core.allowlist import AllowList
from sluicegate.core.errors import invalid
from sluicegate.core.events import ToolsListed
from sluicegate.core.json_limits import DEFAULT_MAX_JSON_DEPTH, json_depth_exceeds
from sluicegate.core.request import ProviderInfo, ServerTool
from sluicegate.core.tool_selection import RequestServer, ToolSelection
from sluicegate.tools.base import ToolOutcome, ToolProvider, ToolProviderError
from sluicegate.tools.mcp_config import NAME_PATTERN, load_mcp_config
from sluicegate.tools.plugins import load_plugins
from sluicegate.tools.ssrf import UrlRefused, check_url

if TYPE_CHECKING:
    from sluicegate.tools.mcp import McpProvider

log = logging.getLogger(__name__)


class ToolSet:
    """The server-side tools of one request, and how to call them."""

    def __init__(
        self,
        listings: list[ToolsListed],
        providers: dict[str, ToolProvider],
        owned: list[ToolProvider] | None = None,
    ) -> None:
        self.listings = listings
        self.tools: dict[str, ServerTool] = {t.name: t for listing in listings for t in listing.tools}
        self._providers = providers  # tool name -> provider
        self._owned = owned or []  # request-scoped providers, closed with the set

    @classmethod
    def empty(cls) -> ToolSet:
        return cls([], {})

    def provider(self, name: str) -> ProviderInfo | None:
        tool = self.tools.get(name)
        return tool.provider if tool is not None else None

    async def call(self, name: str, arguments_json: str) -> ToolOutcome:
        tool, provider = self.tools.get(name), self._providers.get(name)
        if tool is None or provider is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return ToolOutcome(
                f"Error: there is no tool named '{name}'. Available tools: {known}.",
                error=f"unknown tool '{name}'",
            )
        arguments, problem = parse_arguments(arguments_json, tool.input_schema)
        if problem is not None:
            return ToolOutcome(
                f"Error: invalid arguments for the tool '{name}': {problem}. Fix the arguments and call it again.",
                error=f"invalid arguments: {problem}",
            )
        try:
            return await provider.call(name, arguments)
        except Exception as exc:  # a provider must not raise, but a plugin might
            log.exception("tool provider %s raised on %s", tool.provider.id, name)
            return ToolOutcome(
                f"Error: the tool '{name}' failed: {exc}", error=str(exc) or type(exc).__name__
            )

    async def aclose(self) -> None:
        owned, self._owned = self._owned, []
        for provider in owned:
            with contextlib.suppress(Exception):
                await provider.aclose()


def parse_arguments(arguments_json: str, schema: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The arguments as an object that satisfies `schema`, or a description of what is wrong."""
    if not arguments_json.strip():
        arguments: Any = {}
    else:
        try:
            arguments = orjson.loads(arguments_json)
        except orjson.JSONDecodeError as exc:
            return {}, f"they are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(arguments, dict):
        return {}, f"they must be a JSON object, not {type(arguments).__name__}"
    if json_depth_exceeds(arguments, DEFAULT_MAX_JSON_DEPTH):  # jsonschema recurses per level
        return {}, f"they nest more than {DEFAULT_MAX_JSON_DEPTH} levels deep"
    if schema:
        import jsonschema  # imported by the catalog that may call a tool (ToolCatalog)

        validator_class = jsonschema.validators.validator_for(schema)
        try:
            validator_class.check_schema(schema)
        except (jsonschema.SchemaError, RecursionError):
            return arguments, None  # the tool's own schema is broken (or absurdly deep): let the tool judge
        error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(arguments))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            return arguments, f"{error.message}" + (f" (at '{where}')" if where else "")
    return arguments, None


class ToolCatalog:
    """The configured providers; started with the server, closed with it."""

    def __init__(
        self,
        providers: list[ToolProvider] | None = None,
        *,
        max_rounds: int = 25,
        call_timeout: float = 60.0,
        allow_request_servers: bool = False,
        allowed_hosts: AllowList | None = None,
    ) -> None:
        self.providers = {p.info.id: p for p in providers or []}
        self.max_rounds = max_rounds
        self.call_timeout = call_timeout
        self.allow_request_servers = allow_request_servers
        if allow_request_servers:  # import now, not on the loop in the first such request (~0.75 s)
            import sluicegate.tools.mcp  # noqa: F401
        if self.providers or allow_request_servers:  # arguments are checked with it (~0.15 s)
            import jsonschema  # noqa: F401 - a server without server tools never needs its ~3 MiB
        self.allowed_hosts = allowed_hosts or AllowList()

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolCatalog:
        """Raises ConfigError for a broken mcp.json or plugin table; never touches a server."""
        providers: list[ToolProvider] = []
        if settings.tools_mcp_config is not None:
            # The MCP SDK is imported only where MCP is used: it is ~27 MB of a server's memory.
            from sluicegate.tools.mcp import McpProvider

            for server in load_mcp_config(settings.tools_mcp_config):
                providers.append(McpProvider.from_config(server, settings.tools_call_timeout_seconds))
        providers += load_plugins(settings.tools_plugins, settings.base_dir)
        return cls(
            providers,
            max_rounds=settings.tools_max_rounds,
            call_timeout=settings.tools_call_timeout_seconds,
            allow_request_servers=settings.tools_allow_request_servers,
            allowed_hosts=AllowList.parse(settings.tools_allowed_hosts),
        )

    def plugin_ids(self) -> list[str]:
        return sorted(self.providers)

    async def start(self) -> None:
        """Connect to the configured MCP servers and discover their tools in the background."""
        for provider in self.providers.values():
            provider.start()
            log.info("%s '%s' enabled", provider.info.type, provider.info.id)

    async def aclose(self) -> None:
        await asyncio.gather(*(p.aclose() for p in self.providers.values()), return_exceptions=True)

    async def toolset(self, selection: ToolSelection) -> ToolSet:
        chosen: list[tuple[ToolProvider, list[str] | None]] = []
        if selection.all_configured:
            chosen += [(p, None) for p in self.providers.values()]
        for choice in selection.plugins:
            provider = self.providers.get(choice.id)
            if provider is None:
                known = ", ".join(self.plugin_ids()) or "none are configured"
                raise invalid(
                    f"Unknown plugin '{choice.id}' (available: {known}).",
                    param="integrations",
                    code="plugin_not_found",
                )
            chosen.append((provider, choice.allowed_tools))
        owned = [await self._request_provider(server) for server in selection.servers]
        chosen += [(p, s.allowed_tools) for p, s in zip(owned, selection.servers, strict=True)]
        toolset = ToolSet([], {}, list(owned))
        try:
            return await self._assemble(chosen, owned)
        except BaseException:
            await toolset.aclose()  # only closes the request-scoped sessions
            raise

    async def _request_provider(self, server: RequestServer) -> McpProvider:
        if not self.allow_request_servers:
            raise invalid(
                "MCP servers given in the request are disabled on this server; "
                "its operator can enable them with [tools] allow_request_servers = true.",
                param="tools",
                code="request_servers_disabled",
            )
        if not NAME_PATTERN.match(server.server_label):
            raise invalid(
                f"Invalid server_label {server.server_label!r}: use 1-64 letters, digits, '_', '.' or '-'.",
                param="tools",
                code="invalid_server_label",
            )
        try:
            target = await check_url(server.server_url, self.allowed_hosts)
        except UrlRefused as exc:
            raise invalid(
                f"MCP server '{server.server_label}' refused: {exc}.",
                param="tools",
                code="server_url_refused",
            ) from None
        from sluicegate.tools.mcp import McpProvider, http_transport  # imported in __init__ already

        info = ProviderInfo("ephemeral_mcp", server.server_label, server.server_label)
        transport = http_transport(target.url, server.headers, pinned=target)
        return McpProvider(info, transport, call_timeout=self.call_timeout)

    async def _assemble(
        self, chosen: list[tuple[ToolProvider, list[str] | None]], owned: list[McpProvider]
    ) -> ToolSet:
        unique: dict[int, tuple[ToolProvider, list[str] | None]] = {}
        for provider, allowed in chosen:
            unique.setdefault(id(provider), (provider, allowed))
        picked = list(unique.values())
        listed = await asyncio.gather(*(_list(provider) for provider, _ in picked))
        listings: list[ToolsListed] = []
        by_name: dict[str, ToolProvider] = {}
        for (provider, allowed), listing in zip(picked, listed, strict=True):
            tools = []
            for tool in listing.tools:
                if allowed is not None and tool.name not in allowed:
                    continue
                if tool.name in by_name:
                    log.warning(
                        "tool '%s' of %s is hidden: %s offers one of that name",
                        tool.name,
                        provider.info.id,
                        by_name[tool.name].info.id,
                    )
                    continue
                by_name[tool.name] = provider
                tools.append(tool)
            listings.append(ToolsListed(listing.provider, tools, listing.error))
        return ToolSet(listings, by_name, list(owned))


async def _list(provider: ToolProvider) -> ToolsListed:
    try:
        return ToolsListed(provider.info, await provider.list_tools())
    except ToolProviderError as exc:
        return ToolsListed(provider.info, [], str(exc))
    except Exception as exc:  # a plugin that breaks its contract is reported like a dead server
        log.exception("tool provider %s failed to list its tools", provider.info.id)
        return ToolsListed(provider.info, [], f"{provider.info.id} failed to list its tools: {exc}")
