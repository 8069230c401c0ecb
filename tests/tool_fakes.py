"""An in-memory stand-in for `tools.catalog.ToolSet`, for testing the tool loop without MCP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from sluicegate.core.events import ToolsListed
from sluicegate.core.request import ProviderInfo, ServerTool
from sluicegate.tools.base import ToolOutcome

PROVIDER = ProviderInfo("plugin", "mcp/fake", "fake")
Handler = Callable[[dict[str, Any]], Awaitable[str]]


async def echo(arguments: dict[str, Any]) -> str:
    return f"echo {json.dumps(arguments, sort_keys=True)}"


class FakeToolSet:
    """Tools by name with a handler each; arguments are checked against `required` keys."""

    def __init__(
        self,
        handlers: dict[str, Handler],
        *,
        required: dict[str, list[str]] | None = None,
        timeout: float = 30.0,
        provider: ProviderInfo = PROVIDER,
    ) -> None:
        required = required or {}
        self.handlers = handlers
        self.timeout = timeout
        self.calls: list[tuple[str, str]] = []
        schema = {"type": "object", "properties": {}}
        self.tools = {
            name: ServerTool(
                name, f"the {name} tool", {**schema, "required": required.get(name, [])}, provider
            )
            for name in handlers
        }
        self.listings = [ToolsListed(provider, list(self.tools.values()))]

    def provider(self, name: str) -> ProviderInfo | None:
        tool = self.tools.get(name)
        return tool.provider if tool else None

    async def call(self, name: str, arguments_json: str) -> ToolOutcome:
        self.calls.append((name, arguments_json))
        try:
            arguments = json.loads(arguments_json or "{}")
        except ValueError:
            return ToolOutcome(f"Error: arguments are not valid JSON: {arguments_json}", error="invalid JSON")
        missing = [key for key in self.tools[name].input_schema["required"] if key not in arguments]
        if missing:
            return ToolOutcome(f"Error: missing required argument(s) {missing}", error="schema mismatch")
        try:
            return ToolOutcome(await asyncio.wait_for(self.handlers[name](arguments), self.timeout))
        except TimeoutError:
            return ToolOutcome(f"Error: {name} timed out after {self.timeout:g}s", error="timed out")
        except Exception as exc:
            return ToolOutcome(f"Error: {exc}", error=str(exc))

    async def aclose(self) -> None:
        return None
