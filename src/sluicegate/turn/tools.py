"""Opening a turn's model: the engine alone, or the tool loop over as many rounds as it takes.

The first round is admitted here (`Model.open` refuses a full queue at once), so a request is
refused before its response starts — unless approved MCP calls must run first, in which case
the engine needs their results and is opened by the loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import RawEvent, ToolCallDelta, ToolResult, ToolsListed
from sluicegate.core.items import ApprovalRequestItem, ConversationItem, ToolListItem
from sluicegate.core.request import ChatRequest, Message, ProviderInfo, ToolCall
from sluicegate.dialects.base import ServerTools
from sluicegate.engines.instances import Generation
from sluicegate.engines.models import Model
from sluicegate.engines.rounds import loop_generation, model_rounds
from sluicegate.tools.catalog import ToolCatalog, ToolSet
from sluicegate.tools.loop import OpenRound, run_tool_loop, with_server_tools

Json = dict[str, Any]


async def request_toolset(catalog: ToolCatalog, tools: ServerTools) -> ToolSet:
    """The selected tools; a refused selection is a 400 naming the dialect's parameter."""
    try:
        return await catalog.toolset(tools.selection)
    except SluicegateError as exc:
        info = exc.info
        raise SluicegateError(info.kind, info.message, param=tools.param, code=info.code) from None


def _listed(history: list[ConversationItem]) -> set[tuple[str, tuple[str, ...]]]:
    return {
        (i.server_label, tuple(sorted(str(t.get("name", "")) for t in i.tools if isinstance(t, dict))))
        for i in history
        if isinstance(i, ToolListItem) and not i.error
    }


async def open_model(
    chat: ChatRequest,
    model: Model,
    toolset: ToolSet | None,
    tools: ServerTools | None,
    *,
    max_rounds: int,
    history: list[ConversationItem],
    approved: list[ApprovalRequestItem],
) -> Generation:
    """The turn's raw events and the instance serving it."""
    if toolset is None or tools is None or (not toolset.listings and not approved):
        return await model.admit(chat)
    if approved:
        return Generation(
            model.instance_id, _tool_turn(chat, model, toolset, tools, max_rounds, history, approved, None)
        )
    first = await model.admit(with_server_tools(chat, toolset))
    # The loop gets the client's own request: it tells client functions from server tools by it.
    # Closing the turn closes `first` too, even when the loop never reached it.
    return loop_generation(first, _tool_turn(chat, model, toolset, tools, max_rounds, history, [], first))


async def _tool_turn(
    chat: ChatRequest,
    model: Model,
    toolset: ToolSet,
    tools: ServerTools,
    max_rounds: int,
    history: list[ConversationItem],
    approved: list[ApprovalRequestItem],
    first: Generation | None,
) -> AsyncIterator[RawEvent]:
    """Approved calls, then the tool loop; `first` is the already admitted first round."""
    try:
        for number, request in enumerate(approved):
            name, arguments, label = request.name, request.arguments, request.server_label
            provider = toolset.provider(name) or ProviderInfo("ephemeral_mcp", label, label)
            call_id = request.id
            # A negative index keeps it apart from the loop's calls, which count from 0.
            yield ToolCallDelta(-1 - number, arguments, call_id=call_id, name=name, provider=provider)
            outcome = await toolset.call(name, arguments)
            yield ToolResult(call_id, name, outcome.output, provider, outcome.error)
            chat = replace(
                chat,
                messages=[
                    *chat.messages,
                    Message(role="assistant", content="", tool_calls=[ToolCall(call_id, name, arguments)]),
                    Message(role="tool", content=outcome.output, name=name, tool_call_id=call_id),
                ],
            )

        async def open_round(request: ChatRequest) -> AsyncIterator[RawEvent]:
            return (await model.admit(request)).events

        rounds: OpenRound = model_rounds(model, first) if first is not None else open_round
        already = _listed(history)
        kwargs = {"needs_approval": tools.needs_approval} if tools.needs_approval is not None else {}
        async for event in run_tool_loop(chat, toolset, rounds, max_rounds=max_rounds, **kwargs):
            if isinstance(event, ToolsListed) and not _shown(event, tools, already):
                continue
            yield event
    finally:
        if first is not None:  # never iterated when an approved call failed first
            await first.aclose()


def _shown(listing: ToolsListed, tools: ServerTools, already: set[tuple[str, tuple[str, ...]]]) -> bool:
    """A listing is shown for the servers the request names, and not again when the
    conversation already has an identical one (as OpenAI does)."""
    if tools.listed_labels is None:
        return True
    if not tools.shows(listing):
        return False
    names = tuple(sorted(t.name for t in listing.tools))
    return listing.error is not None or (listing.provider.server_label, names) not in already
