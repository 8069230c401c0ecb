"""The segmenter's state machine: raw deltas in, item events out, one event at a time.

`core/segment.py` drives it over an engine's stream. It is a module of its own because it is
compiled (mypyc, `sluicegate/_compiled.py`), and mypyc cannot compile the async generator
that drives it there (`segment`); `Reads`, the stream's task's read loop, is here for the same
reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from sluicegate.core.errors import EngineFailure, ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Answered,
    ApprovalRequested,
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    RawBatch,
    RawEvent,
    ServerToolEvent,
    TextDelta,
    ToolCallDelta,
    ToolResult,
    ToolsListed,
    UsageReport,
    usage_with_fallback,
)
from sluicegate.core.ids import new_id

if TYPE_CHECKING:
    from sluicegate.core.deadlines import Deadline

log = logging.getLogger(__name__)

ITEM_ID_PREFIX = {
    ItemKind.REASONING: "rs_",
    ItemKind.MESSAGE: "msg_",
    ItemKind.REFUSAL: "msg_",
    ItemKind.TOOL_CALL: "fc_",
    ItemKind.TOOL_RESULT: "fco_",
    ItemKind.TOOL_LIST: "mcpl_",
    ItemKind.APPROVAL_REQUEST: "mcpr_",
}
# Per token: an enum member lookup costs ~100 ns in Python 3.11; `Final`, compiled, a C static
# (a module global is a dict lookup, ~130 instructions a read: bench/README.md, gateway "Round
# sixteen").
_REASONING: Final = ItemKind.REASONING


# A delta's own str costs ~60 B whatever its length: a reply of thousands of tokens kept as one
# str per token costs a stream ten times its text. Every COMPACT_PARTS deltas are joined into a
# run (each delta copied once: linear, whatever the reply's length).
COMPACT_PARTS: Final = 256


def _compact(item: Item) -> None:
    runs = item.runs
    item.parts[runs:] = ("".join(item.parts[runs:]),)
    item.runs = runs + 1


class Segmenter:
    def __init__(self) -> None:
        self.count = 0
        self.tool_count = 0  # calls the client runs: their `tool_index`, and the finish reason
        self.server_tool_count = 0  # calls the server runs, numbered apart so clients see 0..n
        self.text_item: Item | None = None
        self.tool_item: Item | None = None
        # Made by a stream's first tool call: a stream of text (every held stream, nearly) keeps
        # no two empty dicts for its life (bench/README.md, gateway "Round fifteen").
        self.tool_by_index: dict[int, Item] | None = None
        # A tool call whose name has not arrived yet: its arguments wait here.
        self.pending_args: dict[int, list[str]] | None = None
        self.usage: UsageReport | None = None
        self.finish: FinishReason | None = None
        self.stop_word: str | None = None
        self.deltas = 0  # what streamed, for usage when the engine never got to report it
        self.reasoning_deltas = 0

    def _open(self, kind: ItemKind, **fields: str | int | None) -> Item:
        item = Item(index=self.count, kind=kind, id=new_id(ITEM_ID_PREFIX[kind]))
        for key, value in fields.items():
            setattr(item, key, value)
        self.count += 1
        return item

    def _close(self, item: Item, out: list[Event]) -> None:
        item.text = "".join(item.parts)
        item.parts, item.runs = [], 0
        item.done = True
        out.append(ItemDone(item))

    def close_text(self, out: list[Event]) -> None:
        if self.text_item is not None:
            self._close(self.text_item, out)
            self.text_item = None

    def close_tool(self, out: list[Event]) -> None:
        item = self.tool_item
        if item is None:
            return
        self.tool_item = None
        if not item.name and item.tool_index is None:
            # The name never came: announce the call now rather than lose it.
            self._announce_tool(item, out)
        self._close(item, out)

    def _announce_tool(self, item: Item, out: list[Event]) -> None:
        if item.provider is None:
            item.tool_index = self.tool_count
            self.tool_count += 1
        else:
            item.tool_index = self.server_tool_count
            self.server_tool_count += 1
        out.append(ItemAdded(item))
        pending = self.pending_args
        buffered = pending.pop(id(item), None) if pending is not None else None
        if buffered:
            text = "".join(buffered)
            item.parts.append(text)
            out.append(ItemDelta(item, text))

    def text(self, event: TextDelta, out: list[Event]) -> None:
        self.deltas += 1
        if event.channel is _REASONING:
            self.reasoning_deltas += 1
        item = self.text_item
        if item is None or item.kind is not event.channel:
            self.close_text(out)
            self.close_tool(out)
            item = self.text_item = self._open(event.channel)
            out.append(ItemAdded(item))
        parts = item.parts
        parts.append(event.text)
        if len(parts) - item.runs >= COMPACT_PARTS:
            _compact(item)
        if event.logprobs:
            item.logprobs.extend(event.logprobs)
        out.append(ItemDelta(item, event.text, event.logprobs))

    def tool(self, event: ToolCallDelta, out: list[Event]) -> None:
        self.deltas += 1
        tools = self.tool_by_index
        if tools is None:
            tools = self.tool_by_index = {}
        item = tools.get(event.index)
        if item is None:
            self.close_text(out)
            self.close_tool(out)
            item = self._open(
                ItemKind.TOOL_CALL, call_id=event.call_id or new_id("call_", 24), name=event.name
            )
            item.provider = event.provider
            tools[event.index] = item
            self.tool_item = item
            if item.name:
                self._announce_tool(item, out)
        elif item is not self.tool_item:
            log.warning("dropping a late delta for tool call %d, already closed", event.index)
            return
        elif event.name and not item.name:
            item.name = event.name
            self._announce_tool(item, out)
        if not event.arguments:
            return
        if item.tool_index is None:
            pending = self.pending_args
            if pending is None:
                pending = self.pending_args = {}
            pending.setdefault(id(item), []).append(event.arguments)
            return
        item.parts.append(event.arguments)
        if len(item.parts) - item.runs >= COMPACT_PARTS:
            _compact(item)
        out.append(ItemDelta(item, event.arguments))

    def server_tool(self, event: ServerToolEvent, out: list[Event]) -> None:
        """A server-side tool's result, listing or approval request: one finished item."""
        self.close_text(out)
        self.close_tool(out)
        match event:
            case ToolResult():
                item = self._open(ItemKind.TOOL_RESULT, call_id=event.call_id, name=event.name)
                item.parts.append(event.output)
            case ToolsListed():
                item = self._open(ItemKind.TOOL_LIST)
                item.tools = event.tools
            case ApprovalRequested():
                item = self._open(ItemKind.APPROVAL_REQUEST, name=event.name)
                item.parts.append(event.arguments)
        item.provider = event.provider
        item.error = getattr(event, "error", None)
        out.append(ItemAdded(item))
        self._close(item, out)

    def step(self, event: RawEvent, out: list[Event]) -> Failed | None:
        """One raw event (not a batch) into `out`; returns the `Failed` that ends the stream."""
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # (~250 instructions a case tried), where `isinstance` of one of our classes compares
        # the type. The same cases in the same order.
        if isinstance(event, TextDelta):
            self.text(event, out)
        elif isinstance(event, ToolCallDelta):
            self.tool(event, out)
        elif isinstance(event, (ToolResult, ToolsListed, ApprovalRequested)):
            self.server_tool(event, out)
        elif isinstance(event, UsageReport):
            self.usage = event
            out.append(event)  # the latest count so far; the final one comes before the end
        elif isinstance(event, Finished):
            self.finish = event.reason
            self.stop_word = event.stop_word
        elif isinstance(event, Failed):
            return event
        elif isinstance(event, Answered):
            pass  # for the route, which did not wait for it
        elif isinstance(event, RawBatch):
            for inner in event.events:
                if (failure := self.step(inner, out)) is not None:
                    return failure
        else:
            out.append(event)  # load and prompt progress pass through unchanged
        return None

    def end(self, out: list[Event], failure: Failed | None) -> None:
        if failure is not None or self.finish in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER):
            for item in (self.text_item, self.tool_item):
                if item is not None:
                    item.cut_short = True
        # On a failure the open items stay open: an item cut off by an error is never reported
        # done (a client would run a cut-off call); the stream goes straight to its error ending.
        # A server-side call is the exception: the tool loop runs it (or not) itself, and its
        # dialects show it ending with the response.
        if failure is None:
            self.close_text(out)
        if failure is None or (self.tool_item is not None and self.tool_item.provider is not None):
            self.close_tool(out)
        usage = usage_with_fallback(
            self.usage.usage if self.usage is not None else None, self.deltas, self.reasoning_deltas
        )
        if usage is not None:
            out.append(UsageReport(usage))
        if failure is not None:
            out.append(failure)
            return
        reason = self.finish or FinishReason.STOP
        if self.tool_count and reason is FinishReason.STOP:
            reason = FinishReason.TOOL_CALLS
        elif not self.tool_count and reason is FinishReason.TOOL_CALLS:
            reason = FinishReason.STOP
        out.append(Finished(reason, self.stop_word if reason is FinishReason.STOP else None))


class Segments:
    """One stream's segmentation, one read at a time: `push` a read, `end` once."""

    __slots__ = ("deadline", "failure", "state")

    def __init__(self, deadline: Deadline | None = None, state: Segmenter | None = None) -> None:
        self.deadline = deadline
        self.state = state or Segmenter()
        self.failure: Failed | None = None  # what ended the stream: nothing is pushed after it

    def push(self, event: RawEvent, out: list[Event]) -> bool:
        """One read into `out`; False when it failed the stream (`failure`): what came before
        the failure in the read is in `out`, what came after it is dropped."""
        deadline = self.deadline
        if deadline is not None:  # any engine event is the model alive: the idle clock restarts
            deadline.last = deadline.clock()
        state = self.state
        if type(event) is TextDelta:  # per token: before any other check
            state.text(event, out)
            return True
        if type(event) is RawBatch:  # one upstream read: one step here
            return self._read(event.events, out)
        if (failure := state.step(event, out)) is not None:
            self.failure = failure
            return False
        return True

    def push_read(self, events: list[RawEvent], out: list[Event], now: float) -> bool:
        """`push(RawBatch(events), out)` for a read the fast lane carries, without the batch
        object; `now`: the loop's time it came in, which is the deadline's clock (armed by the
        stream's first read, before a lane carries any)."""
        deadline = self.deadline
        if deadline is not None:
            deadline.last = now
        return self._read(events, out)

    def _read(self, events: list[RawEvent], out: list[Event]) -> bool:
        """One read's events into `out`, as `push` says."""
        state = self.state
        for inner in events:
            if type(inner) is TextDelta:
                state.text(inner, out)
            elif (failure := state.step(inner, out)) is not None:
                self.failure = failure
                return False
        return True

    def end(self, out: list[Event]) -> None:
        """The stream's ending into `out`: closed items, the last usage, the terminal event."""
        self.state.end(out, self.failure)


def failure_from_exception(exc: Exception) -> Failed:
    if isinstance(exc, EngineFailure):
        return Failed(ErrorInfo(ErrorKind.ENGINE, str(exc), code=exc.code))
    log.exception("engine raised unexpectedly", exc_info=exc)
    return Failed(ErrorInfo(ErrorKind.ENGINE, f"the engine failed unexpectedly ({type(exc).__name__})"))


_NEW, _READING, _OVER = 0, 1, 2


class Reads:
    """The engine's events as the stream's task reads them, under `deadline` (its timer armed
    from the first read; each event's clock is `Segments.push`'s). An engine's exception, or the
    deadline's expiry, comes as a final `Failed`; `raw` is closed on every path, and the timer
    disarmed, by the time this stream is done or closed (`aclose`).

    `next()` returns None at the end, where an async iterator raises StopAsyncIteration: it is
    compiled with what it reads (the engine's relay) and what reads it (the turn's frames), and
    compiled, an exception raised into compiled code costs a traceback entry in each frame it
    passes (~2 k instructions a frame). What a generator's `finally` did is `_close`, run once.
    Closed before its first read, it does nothing (as a generator never started): `raw`'s owner
    closes that."""

    __slots__ = ("_deadline", "_raw", "_state")

    def __init__(self, raw: AsyncIterator[RawEvent], deadline: Deadline | None = None) -> None:
        self._raw = raw
        self._deadline = deadline
        self._state = _NEW

    async def next(self) -> RawEvent | None:
        """The next event, or None: the stream is over (its last event was read before)."""
        state = self._state
        if state != _READING:
            if state == _NEW:
                self._state = _READING
                if self._deadline is not None:
                    self._deadline.arm()
            else:
                return None
        failure: Failed | None = None
        try:
            return await self._raw.__anext__()
        except StopAsyncIteration:
            pass
        except asyncio.CancelledError:
            deadline = self._deadline
            if deadline is None or not deadline.owns_cancel():
                await self._close()
                raise  # a real cancellation (client gone), not the deadline's timer
            failure = deadline.failure()
        except Exception as exc:  # an engine bug must still end the stream properly
            failure = failure_from_exception(exc)
        await self._close()
        return failure

    async def aclose(self) -> None:
        if self._state == _READING:
            await self._close()
        else:
            self._state = _OVER

    async def _close(self) -> None:
        self._state = _OVER
        deadline = self._deadline
        if deadline is not None:
            deadline.disarm()
        aclose = getattr(self._raw, "aclose", None)
        if aclose is not None:
            await aclose()
