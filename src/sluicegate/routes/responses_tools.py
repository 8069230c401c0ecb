"""Server-side tools for `POST /v1/responses`: which tools a request gets, the approvals it
answers, and the raw event stream through the tool loop.

- The request's `{type: "mcp"}` tools are request servers (`server_url`) or configured servers
  named by label (`mcp/<server_label>`); every configured provider's tools are offered too, as in
  Chat Completions (what `all_configured` does, chosen one by one here). Listings (`mcp_list_tools`) are shown for the servers the request names,
  and not again when the conversation already has an identical one (as OpenAI does).
- An `mcp_approval_response` that approves runs its call at the start of the turn, streamed as
  an `mcp_call` (its call_id is the approval request's id, so the item names it), and the model
  goes on from its result. One that denies is a result saying so (`items_to_messages`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from sluicegate.core.errors import invalid
from sluicegate.core.events import RawEvent, ToolCallDelta, ToolResult, ToolsListed
from sluicegate.core.request import ChatRequest, Message, ProviderInfo, ToolCall
from sluicegate.dialects.responses_mcp_request import approval_policy
from sluicegate.dialects.responses_request import ResponsesRequest
from sluicegate.engines.instances import Generation
from sluicegate.engines.models import Model
from sluicegate.store.base import Store
from sluicegate.tools.catalog import PluginChoice, RequestServer, ToolSelection, ToolSet
from sluicegate.tools.loop import OpenRound, model_rounds, run_tool_loop

Json = dict[str, Any]


def tool_selection(req: ResponsesRequest, configured: list[str]) -> ToolSelection:
    """Request servers, plus every configured provider (`configured`: the catalog's plugin
    ids), each chosen explicitly rather than with `all_configured` so that a configured server
    (or plugin) the request names by label gets that tool's `allowed_tools`."""
    named = {_plugin_id(s.server_label, configured): s for s in req.mcp_servers if s.server_url is None}
    selection = ToolSelection()
    for plugin_id in configured:
        server = named.pop(plugin_id, None)
        selection.plugins.append(PluginChoice(plugin_id, server.allowed_tools if server else None))
    # Labels naming no configured server: the catalog refuses them, naming the known ones.
    selection.plugins += [PluginChoice(plugin_id, s.allowed_tools) for plugin_id, s in named.items()]
    for server in req.mcp_servers:
        if server.server_url is not None:
            selection.servers.append(
                RequestServer(server.server_label, server.server_url, server.headers, server.allowed_tools)
            )
    return selection


def _plugin_id(label: str, configured: list[str]) -> str:
    """A configured MCP server `mcp/<label>`, or a plugin named `<label>` (e.g. `files`)."""
    return label if label in configured and f"mcp/{label}" not in configured else f"mcp/{label}"


@dataclass(slots=True)
class Approvals:
    """Approval requests this turn's input approves (to run first), and requests it answers
    that were found in the store rather than the history (the model needs them in front)."""

    approved: list[Json] = field(default_factory=list)
    fetched: list[Json] = field(default_factory=list)


async def resolve_approvals(history: list[Json], input_items: list[Json], store: Store) -> Approvals:
    """Every `mcp_approval_response` must answer a known approval request; an approved request
    already run (an `mcp_call` names it) is not run again."""
    requests = {i["id"]: i for i in history if i.get("type") == "mcp_approval_request"}
    done = {i.get("approval_request_id") for i in history if i.get("type") == "mcp_call"}
    out = Approvals()
    for index, item in enumerate(input_items):
        if item.get("type") != "mcp_approval_response":
            continue
        request_id = item["approval_request_id"]
        request = requests.get(request_id)
        if request is None:
            found = await store.find_item(request_id)
            if found is None or found.get("type") != "mcp_approval_request":
                raise invalid(
                    f"No MCP approval request with id '{request_id}' was found; pass "
                    "'previous_response_id' of the response that asked for it.",
                    f"input[{index}].approval_request_id",
                    code="approval_request_not_found",
                )
            request = requests[request_id] = found
            out.fetched.append(found)
        if item["approve"] and request_id not in done:
            done.add(request_id)
            out.approved.append(request)
    return out


def _listed(history: list[Json]) -> set[tuple[str, tuple[str, ...]]]:
    return {
        (i.get("server_label", ""), tuple(sorted(t.get("name", "") for t in i.get("tools") or [])))
        for i in history
        if i.get("type") == "mcp_list_tools" and not i.get("error")
    }


@dataclass(slots=True)
class ToolRun:
    """Everything the tool loop needs for one response."""

    req: ResponsesRequest
    chat: ChatRequest
    toolset: ToolSet
    model: Model
    max_rounds: int
    history: list[Json]
    approved: list[Json]

    def shown(self, listing: ToolsListed) -> bool:
        if listing.provider.server_label not in {s.server_label for s in self.req.mcp_servers}:
            return False
        names = tuple(sorted(t.name for t in listing.tools))
        return listing.error is not None or (listing.provider.server_label, names) not in _listed(
            self.history
        )

    async def events(self, first: Generation | None) -> AsyncIterator[RawEvent]:
        """Approved calls, then the tool loop; `first` is the already admitted first round
        (None when approved calls run first: the engine must see their results)."""
        chat = self.chat
        for number, request in enumerate(self.approved):
            name, arguments = request.get("name") or "", request.get("arguments") or ""
            label = request.get("server_label") or ""
            provider = self.toolset.provider(name) or ProviderInfo("ephemeral_mcp", label, label)
            call_id = request["id"]
            # A negative index keeps it apart from the loop's calls, which count from 0.
            yield ToolCallDelta(-1 - number, arguments, call_id=call_id, name=name, provider=provider)
            outcome = await self.toolset.call(name, arguments)
            yield ToolResult(call_id, name, outcome.output, provider, outcome.error)
            chat = replace(
                chat,
                messages=[
                    *chat.messages,
                    Message(role="assistant", content="", tool_calls=[ToolCall(call_id, name, arguments)]),
                    Message(role="tool", content=outcome.output, name=name, tool_call_id=call_id),
                ],
            )
        open_round: OpenRound = model_rounds(self.model, first) if first is not None else self._open
        needs_approval = approval_policy(self.req.mcp_servers)
        async for event in run_tool_loop(
            chat, self.toolset, open_round, max_rounds=self.max_rounds, needs_approval=needs_approval
        ):
            if isinstance(event, ToolsListed) and not self.shown(event):
                continue
            yield event

    async def _open(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        return self.model.open(request).events
