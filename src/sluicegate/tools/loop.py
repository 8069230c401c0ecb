"""The tool loop: server-side tools run between engine rounds, in every dialect alike.

Raw events in, raw events out, before segmentation: each round's reasoning, text and tool calls
stream as the engine produces them; server calls (tagged with their provider) run in parallel
when the round ends; their results stream as `ToolResult`s, go back to the model as `tool`
messages after an assistant message with the calls, and the engine runs again. Only the last
round's `Finished` passes, and usage is the sum over rounds.

The turn ends, handing back to the client, when a round makes no server call, when it makes a
client call (the server calls of that round still run: their calls and results stay in the
output, so stored state has them for the next turn), or when a call needs approval. At the
round limit the response ends with `Failed` code `max_tool_rounds`, after the last round's
calls have run. Tool problems never end the stream: an unknown name, bad arguments, a tool that
raises or times out all become an error result the model is told about.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import (
    ApprovalRequested,
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    RawBatch,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    ToolResult,
    ToolsListed,
    Usage,
    UsageReport,
)
from sluicegate.core.ids import new_id
from sluicegate.core.request import ChatRequest, Message, ProviderInfo, ServerTool, ToolCall
from sluicegate.observe import tracing
from sluicegate.observe.requests import RequestObserver
from sluicegate.observe.requests import current as current_observer
from sluicegate.tools.base import ToolOutcome

log = logging.getLogger(__name__)

MAX_ROUNDS_CODE = "max_tool_rounds"

OpenRound = Callable[[ChatRequest], Awaitable[AsyncIterator[RawEvent]]]


class ToolSetLike(Protocol):
    """What the loop needs of `tools.catalog.ToolSet` (the tools one request may use)."""

    listings: list[ToolsListed]
    tools: dict[str, ServerTool]

    def provider(self, name: str) -> ProviderInfo | None: ...

    async def call(self, name: str, arguments_json: str) -> ToolOutcome: ...


def with_server_tools(request: ChatRequest, toolset: ToolSetLike) -> ChatRequest:
    """The request with the server tools offered too; a request tool wins on a name clash."""
    own = {spec.name for spec in request.tools}
    extra = [tool.spec() for name, tool in toolset.tools.items() if name not in own]
    return replace(request, tools=[*request.tools, *extra]) if extra else request


@dataclass(slots=True)
class _Call:
    index: int  # the engine's index within this round
    out_index: int  # unique across rounds: the segmenter keys calls by it
    call_id: str = ""
    name: str | None = None
    provider: ProviderInfo | None = None  # None: the client runs it
    approval: bool = False  # held back: the client must approve it first
    announced: bool = False
    parts: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        return "".join(self.parts)


class _Round:
    """One engine run: its calls, its text, its usage and how it finished."""

    def __init__(self, loop: _Loop, offset: int) -> None:
        self.loop = loop
        self.offset = offset
        self.calls: dict[int, _Call] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.usage = Usage()
        self.finish: FinishReason | None = None

    def tool_delta(self, event: ToolCallDelta) -> list[ToolCallDelta]:
        call = self.calls.get(event.index)
        if call is None:
            call = self.calls[event.index] = _Call(event.index, self.offset + event.index)
            call.call_id = event.call_id or new_id("call_", 24)
        if event.name and call.name is None:
            call.name = event.name
            self.loop.classify(call)
        call.parts.append(event.arguments)
        if call.name is None or call.approval:
            return []  # held until the name says whose call it is (or for approval)
        if not call.announced:
            call.announced = True
            return [ToolCallDelta(call.out_index, call.arguments, call.call_id, call.name, call.provider)]
        return [ToolCallDelta(call.out_index, event.arguments)] if event.arguments else []

    def unnamed(self) -> list[ToolCallDelta]:
        """Calls whose name never came: pass them on as they are (the client's to judge)."""
        out = []
        for call in self.calls.values():
            if call.name is None:
                call.announced = True
                out.append(ToolCallDelta(call.out_index, call.arguments, call.call_id))
        return out

    @property
    def width(self) -> int:
        return max(self.calls, default=-1) + 1


class _Loop:
    def __init__(
        self, toolset: ToolSetLike, client_names: set[str], needs_approval: Callable[[ServerTool], bool]
    ):
        self.toolset = toolset
        self.client_names = client_names
        self.needs_approval = needs_approval
        # A name nobody offers is still the server's to answer (the model is told it does not
        # exist); it is reported under the first provider of the request.
        self.fallback = toolset.listings[0].provider if toolset.listings else None

    def classify(self, call: _Call) -> None:
        name = call.name or ""
        if name in self.client_names:
            return
        tool = self.toolset.tools.get(name)
        if tool is not None:
            call.provider = tool.provider
            call.approval = self.needs_approval(tool)
        else:
            call.provider = self.fallback


def run_tool_loop(
    request: ChatRequest,
    toolset: ToolSetLike,
    open_round: OpenRound,
    *,
    max_rounds: int,
    needs_approval: Callable[[ServerTool], bool] = lambda tool: False,
) -> AsyncIterator[RawEvent]:
    """Run `request` to the end of its turn, running server tools between engine rounds.

    `request` is the client's own (without the server tools: they are added here), so its tools
    are the client's functions. `open_round` admits one engine run of the request it is given.
    """
    events = _rounds(request, toolset, open_round, max_rounds, needs_approval)
    observer = current_observer()
    if observer is None or observer.parent_span is None:  # not traced: no layer, no cost
        return events
    return _traced_rounds(events, observer)


async def _rounds(
    request: ChatRequest,
    toolset: ToolSetLike,
    open_round: OpenRound,
    max_rounds: int,
    needs_approval: Callable[[ServerTool], bool],
) -> AsyncIterator[RawEvent]:
    loop = _Loop(toolset, {spec.name for spec in request.tools}, needs_approval)
    request = with_server_tools(request, toolset)
    messages = list(request.messages)
    for listing in toolset.listings:
        yield listing
    total = Usage()
    offset = 0
    observer = current_observer()
    traced = observer is not None and observer.parent_span is not None
    for number in range(1, max(max_rounds, 1) + 1):
        round_ = _Round(loop, offset)
        if traced:
            assert observer is not None
            _start_round_span(observer, number)
        try:
            events = await open_round(replace(request, messages=list(messages)))
        except SluicegateError as exc:  # e.g. the queue filled up while tools ran
            yield Failed(exc.info)
            return
        try:
            async for received in events:
                # A batch (one upstream read) is taken apart: the loop looks at every call delta.
                for event in received.events if type(received) is RawBatch else (received,):
                    if type(event) is TextDelta:
                        if event.channel is ItemKind.MESSAGE:
                            round_.text.append(event.text)
                        elif event.channel is ItemKind.REASONING:
                            round_.reasoning.append(event.text)
                        yield event
                    elif type(event) is ToolCallDelta:
                        for delta in round_.tool_delta(event):
                            yield delta
                    elif type(event) is UsageReport:
                        round_.usage = event.usage  # cumulative within a run
                        yield UsageReport(_add(total, event.usage))
                    elif type(event) is Finished:
                        round_.finish = event.reason
                    elif type(event) is Failed:
                        yield event
                        return
                    else:
                        yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()  # the engine's slot is free before any tool runs
        for delta in round_.unnamed():
            yield delta
        total = _add(total, round_.usage)
        offset += round_.width
        calls = list(round_.calls.values())
        server = [c for c in calls if c.provider is not None and c.name is not None and not c.approval]
        ends_turn = any(c.provider is None for c in calls) or any(c.approval for c in calls)
        if round_.finish in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER) or not calls:
            yield Finished(round_.finish or FinishReason.STOP)
            return
        outcomes: list[ToolOutcome] = []
        tasks = [asyncio.ensure_future(_run(toolset, call, observer if traced else None)) for call in server]
        try:
            for call, task in zip(server, tasks, strict=True):
                outcome = await task
                outcomes.append(outcome)
                assert call.provider is not None
                yield ToolResult(call.call_id, call.name or "", outcome.output, call.provider, outcome.error)
        finally:  # also when the client went away: running calls are cancelled, not left behind
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for call in calls:
            if call.approval and call.provider is not None:
                yield ApprovalRequested(call.name or "", call.arguments, call.provider)
        if ends_turn or not server:
            yield Finished(round_.finish or FinishReason.TOOL_CALLS)
            return
        if number == max_rounds:
            break
        messages.append(
            Message(
                role="assistant",
                content="".join(round_.text),
                tool_calls=[ToolCall(c.call_id, c.name or "", c.arguments) for c in server],
                reasoning="".join(round_.reasoning) or None,
            )
        )
        messages += [
            Message(role="tool", content=outcome.output, name=call.name, tool_call_id=call.call_id)
            for call, outcome in zip(server, outcomes, strict=True)
        ]
        if request.tool_choice not in ("auto", "none"):
            # A forced call was made; forcing it again would only loop until the round limit.
            request = replace(request, tool_choice="auto")
    yield Failed(
        ErrorInfo(
            ErrorKind.ENGINE,
            f"Stopped after {max_rounds} tool rounds (the [tools] max_rounds limit): the model "
            "kept calling tools. The calls and results so far are in the output.",
            code=MAX_ROUNDS_CODE,
        )
    )


async def _run(toolset: ToolSetLike, call: _Call, observer: RequestObserver | None) -> ToolOutcome:
    """One call's outcome, traced under the round when `observer` is given."""
    if observer is None or observer.parent_span is None:
        return await _outcome(toolset, call)
    provider = call.provider.id if call.provider is not None else ""
    span = tracing.start_child(
        observer.parent_span,
        f"execute_tool {call.name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name or "",
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.tool.type": "extension",  # runs here, on the server (MCP or a plugin)
            "sluicegate.tool.provider": provider,
        },
    )
    error: str | None = "cancelled"
    try:
        outcome = await _outcome(toolset, call)
        error = "tool_error" if outcome.error else None
        return outcome
    finally:
        tracing.end(span, error=error)


async def _outcome(toolset: ToolSetLike, call: _Call) -> ToolOutcome:
    """One call's outcome; whatever goes wrong becomes an error the model is told about."""
    name = call.name or ""
    if name not in toolset.tools:
        offered = ", ".join(sorted(toolset.tools)) or "none"
        return ToolOutcome(
            f"Error: there is no tool named {name!r}. The tools available are: {offered}.",
            error=f"Cannot find tool with name {name}.",
        )
    try:
        return await toolset.call(name, call.arguments)
    except Exception as exc:  # a provider bug must not end the response
        log.exception("tool %s raised", name)
        return ToolOutcome(
            f"Error: the tool {name} failed ({type(exc).__name__}).", error=str(exc) or type(exc).__name__
        )


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.cached_tokens + b.cached_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
        a.audio_tokens + b.audio_tokens,
        a.accepted_prediction_tokens + b.accepted_prediction_tokens,
        a.rejected_prediction_tokens + b.rejected_prediction_tokens,
        a.shifted_tokens + b.shifted_tokens,
    )


def _start_round_span(observer: RequestObserver, number: int) -> None:
    """Round `number` begins: its span (under the request's) is where its upstream call and tool
    calls hang; the previous round's ends."""
    _end_round_span(observer)
    if observer.span is None:  # the request's span has ended (nothing left to hang from)
        return
    span = tracing.start_child(
        observer.span, f"tool_round {number}", attributes={"sluicegate.tool_round": number}
    )
    observer.parent_span = span


def _end_round_span(observer: RequestObserver) -> None:
    if observer.parent_span is not None and observer.parent_span is not observer.span:
        tracing.end(observer.parent_span)
    observer.parent_span = observer.span


async def _traced_rounds(
    events: AsyncIterator[RawEvent], observer: RequestObserver
) -> AsyncIterator[RawEvent]:
    """The rounds, with the last round's span ended however the turn ends."""
    try:
        async for event in events:
            yield event
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
        _end_round_span(observer)
