"""Responses encoding: canonical events → the full Responses event lifecycle, and the
response object (`ResponseResource`) every lifecycle event, GET and stored record carries.

Per item: `output_item.added` → (`content_part.added` → deltas → `*.done` → `content_part.done`)
→ `output_item.done`; `output_index` counts output items contiguously in added order, `item_id`
is the item's id, and the terminal event's `output` has the same ids. Every event gets the next
`sequence_number`, starting at 0. Frames are returned one per event, so a log of them is indexed
by sequence number.

Server-side tools (see `responses_mcp`): a listing is `output_item.added` →
`mcp_list_tools.in_progress` → `.completed`/`.failed` → `output_item.done`; a server call is
`output_item.added` → `mcp_call.in_progress` → `mcp_call_arguments.delta`… → `.done`, and its
`output_item.done` waits for the TOOL_RESULT with its call_id (→ `mcp_call.completed`/`.failed`
first). A result adds no output item, which is why output indexes are counted here rather than
taken from the canonical index. Calls still running when the response ends are closed as
`incomplete` (`mcp_call.failed`) before the terminal event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import DONE, Frame
from sluicegate.dialects.responses.items import logprob_entries, output_item
from sluicegate.dialects.responses.mcp import (
    is_server_call,
    is_server_result,
    mcp_call_item,
    mcp_list_tools_item,
    orphan_result_item,
    output_items,
)
from sluicegate.dialects.responses.request import ResponsesRequest
from sluicegate.dialects.responses.tool_types import ClientTool, custom_input

Json = dict[str, Any]
ReasoningNames = Literal["openai", "open_responses"]

_MESSAGE = ItemKind.MESSAGE  # per token: an enum member lookup costs ~100 ns in Python 3.11
RESPONSE_ERROR_CODE = {
    ErrorKind.TIMEOUT: "request_timeout",
    ErrorKind.IDLE_TIMEOUT: "request_timeout",
    ErrorKind.CANCELLED: "cancelled",
    ErrorKind.RATE_LIMITED: "rate_limit_exceeded",
    ErrorKind.OVERLOADED: "server_is_overloaded",
    ErrorKind.ENGINE: "model_error",
    ErrorKind.INVALID_REQUEST: "invalid_prompt",
}
# Specific codes clients act on (Codex: context_length_exceeded and insufficient_quota are
# final, the others retryable), passed through whatever the kind.
SPECIFIC_CODES = frozenset(
    {
        "context_length_exceeded",
        "rate_limit_exceeded",
        "insufficient_quota",
        "invalid_prompt",
        "server_is_overloaded",
        "store_unavailable",  # ours (README): the response store is down, retry shortly
        "vector_store_timeout",
        "invalid_image",
    }
)


def response_error_code(error: ErrorInfo) -> str:
    """The `error.code` of a failed response: the specific code when a client acts on it,
    else one derived from the kind (`server_error` for what is left)."""
    if error.code in SPECIFIC_CODES:
        return error.code
    if error.code == "max_tool_rounds":  # the server's own limit on its tool loop
        return "server_error"
    return RESPONSE_ERROR_CODE.get(error.kind, "server_error")


def usage_object(usage: Usage) -> Json:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


@dataclass(slots=True)
class ResponseState:
    """Everything the response object echoes from its request, plus what changes."""

    id: str
    request: ResponsesRequest
    created_at: int = field(default_factory=lambda: int(time.time()))
    status: str = "in_progress"
    completed_at: int | None = None
    error: Json | None = None
    incomplete_details: Json | None = None
    usage: Json | None = None
    # seals a reasoning item's text for `include: ["reasoning.encrypted_content"]`
    seal_reasoning: Callable[[str], str] | None = None

    def object(self, output: list[Json]) -> Json:
        r = self.request
        s = r.sampling
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "incomplete_details": self.incomplete_details,
            "model": r.model,
            "previous_response_id": r.previous_response_id,
            "instructions": r.instructions,
            "output": output,
            "error": self.error,
            "tools": r.tools,
            "tool_choice": r.tool_choice,
            "truncation": r.truncation,
            "parallel_tool_calls": r.parallel_tool_calls,
            "text": r.text,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "presence_penalty": s.presence_penalty or 0.0,
            "frequency_penalty": s.frequency_penalty or 0.0,
            "top_logprobs": s.top_logprobs or 0,
            "temperature": 1.0 if s.temperature is None else s.temperature,
            "reasoning": r.reasoning,
            "user": r.user,
            "usage": self.usage,
            "max_output_tokens": s.max_tokens,
            "max_tool_calls": r.max_tool_calls,
            "store": r.store,
            "background": r.background,
            "service_tier": r.service_tier,
            "metadata": r.metadata,
            "safety_identifier": r.safety_identifier,
            "prompt_cache_key": r.prompt_cache_key,
        }


def summarized(reasoning: Json) -> Json:
    """A reasoning item as it is when `reasoning.summary` was asked for: a local model has no
    separate summarizer, so its summary is its reasoning text (docs/responses.md)."""
    text = "".join(part.get("text", "") for part in reasoning.get("content") or [])
    return {"type": "reasoning", "id": reasoning["id"], "summary": [{"type": "summary_text", "text": text}]}


def items_output(
    items: list[Item],
    open_status: str = "incomplete",
    tools: dict[str, ClientTool] | None = None,
    *,
    reasoning: Callable[[Json], Json] | None = None,
) -> list[Json]:
    """Items as output; `open_status` for items not done yet (`in_progress` while running);
    `tools` renders calls of the request's client tools by their kind; `reasoning` finishes
    reasoning items (summaries, sealed content) as the request asked."""

    def one(item: Item) -> Json:
        done_status = "incomplete" if item.cut_short else "completed"
        out = output_item(item, done_status if item.done else open_status, tools)
        return reasoning(out) if reasoning is not None and item.kind is ItemKind.REASONING else out

    return output_items(items, one, open_status)


class ResponsesEncoder:
    def __init__(
        self, state: ResponseState, accumulator: Accumulator, *, reasoning_names: ReasoningNames = "openai"
    ) -> None:
        self.state = state
        self.accumulator = accumulator
        self.seq = 0
        prefix = "response.reasoning_text" if reasoning_names == "openai" else "response.reasoning"
        self.reasoning_delta = prefix + ".delta"
        self.reasoning_done = prefix + ".done"
        self.final: Json | None = None  # the response object once a terminal event was sent
        self.output_index: dict[int, int] = {}  # canonical item index → output index
        self.running_calls: dict[str, Item] = {}  # server calls waiting for their result, by call_id
        # `reasoning.summary` asked for: reasoning streams as summary events, not reasoning_text.
        self.summaries = bool((state.request.reasoning or {}).get("summary"))
        # The per-token `output_text.delta` frame, its bytes around the sequence number and the
        # text kept for the item being streamed: byte for byte what `_frame` writes.
        self._text_item: Item | None = None
        self._text_mid = b""

    def _frame(self, kind: str, fields: Json) -> Frame:
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return Frame(orjson.dumps(payload), kind)

    def snapshot(self) -> Json:
        running = self.state.status in ("queued", "in_progress")
        open_status = "in_progress" if running else "incomplete"
        tools = self.state.request.tool_kinds
        output = items_output(self.accumulator.snapshot(), open_status, tools, reasoning=self._reasoning)
        return self.state.object(output)

    def opening(self) -> list[Frame]:
        """`response.created`, then `response.in_progress` — or, for a background response,
        `response.queued` (it goes in progress with the engine's first event)."""
        queued = self.state.request.background
        self.state.status = "queued" if queued else "in_progress"
        frames = [self._frame("response.created", {"response": self.state.object([])})]
        if queued:
            frames.append(self._frame("response.queued", {"response": self.state.object([])}))
        else:
            frames.append(self._frame("response.in_progress", {"response": self.state.object([])}))
        return frames

    def _in_progress(self) -> list[Frame]:
        self.state.status = "in_progress"
        return [self._frame("response.in_progress", {"response": self.state.object([])})]

    def closing(self) -> list[Frame]:
        return [DONE]

    def body(self, result: ChatResult) -> Json:
        return self.final or self.snapshot()

    def response_object(self) -> Json | None:
        return self.final or self.snapshot()

    def encode(self, event: Event) -> list[Frame]:
        if self.state.status == "queued":
            return [*self._in_progress(), *self.encode_running(event)]
        return self.encode_running(event)

    def encode_running(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token: before the match's class checks
            frame = self._delta(event)
            return [frame] if frame is not None else []
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # per case tried, `isinstance` of one of our classes a type compare (docs/compiled.md).
        if isinstance(event, ItemAdded):
            return self._added(event.item)
        if isinstance(event, ItemDone):
            return self._done(event.item)
        if isinstance(event, UsageReport):
            self.state.usage = usage_object(event.usage)
        elif isinstance(event, Finished):
            return self._finished(event.reason)
        elif isinstance(event, Failed):
            return self._failed(event.error)
        return []

    def _reasoning(self, item: Json) -> Json:
        """A reasoning item as the request asked: as a summary, with its content sealed."""
        text = "".join(part.get("text", "") for part in item.get("content") or [])
        if self.summaries:
            item = summarized(item)
        seal = self.state.seal_reasoning
        if seal is not None and "reasoning.encrypted_content" in self.state.request.include:
            item["encrypted_content"] = seal(text)
        return item

    def _client_tool(self, item: Item) -> ClientTool | None:
        if item.kind is not ItemKind.TOOL_CALL or item.provider is not None:
            return None
        return self.state.request.tool_kinds.get(item.name or "")

    def _where(self, item: Item) -> Json:
        return {"item_id": item.id, "output_index": self.output_index[item.index]}

    def _item_frame(self, kind: str, item: Item, body: Json) -> Frame:
        return self._frame(kind, {"output_index": self.output_index[item.index], "item": body})

    def _added(self, item: Item) -> list[Frame]:
        if is_server_result(item):
            return []  # it completes its call, at done
        self.output_index[item.index] = len(self.output_index)
        if is_server_call(item):
            shell = mcp_call_item(item, None, "in_progress")
            shell["arguments"] = ""
            return [
                self._item_frame("response.output_item.added", item, shell),
                self._frame("response.mcp_call.in_progress", self._where(item)),
            ]
        if item.kind is ItemKind.TOOL_LIST:
            return [
                self._item_frame("response.output_item.added", item, mcp_list_tools_item(item, empty=True)),
                self._frame("response.mcp_list_tools.in_progress", self._where(item)),
            ]
        tool = self._client_tool(item)
        if tool is not None and tool.kind not in ("function", "custom"):
            return []  # its fields are known once its arguments are: added and done together
        shell = output_item(item, "in_progress", self.state.request.tool_kinds)
        # The item may already hold its first delta (segmented together): the shell starts empty.
        if item.kind in (ItemKind.MESSAGE, ItemKind.REFUSAL, ItemKind.REASONING):
            shell["content"] = []
        elif tool is not None and tool.kind == "custom":
            shell["input"] = ""
        elif item.kind is ItemKind.TOOL_CALL:
            shell["arguments"] = ""
        if item.kind is ItemKind.REASONING and self.summaries:
            shell = {"type": "reasoning", "id": item.id, "summary": []}
            summary_part = {"type": "summary_text", "text": ""}
            fields = {**self._where(item), "summary_index": 0, "part": summary_part}
            return [
                self._item_frame("response.output_item.added", item, shell),
                self._frame("response.reasoning_summary_part.added", fields),
            ]
        frames = [self._item_frame("response.output_item.added", item, shell)]
        part = _empty_part(item.kind)
        if part is not None:
            frames.append(
                self._frame(
                    "response.content_part.added", {**self._where(item), "content_index": 0, "part": part}
                )
            )
        return frames

    def _delta(self, event: ItemDelta) -> Frame | None:
        item = event.item
        kind = item.kind
        if kind is _MESSAGE and not event.logprobs:  # per token (a message is no tool call)
            if item is not self._text_item:
                self._text_item = item
                self._text_mid = b',"item_id":%b,"output_index":%d,"content_index":0,"delta":' % (
                    orjson.dumps(item.id),
                    self.output_index[item.index],
                )
            seq = self.seq
            self.seq = seq + 1
            return Frame(
                b'{"type":"response.output_text.delta","sequence_number":%d%b%b,"logprobs":[]}'
                % (seq, self._text_mid, orjson.dumps(event.text)),
                "response.output_text.delta",
            )
        tool = self._client_tool(item)
        if tool is not None and tool.kind != "function":
            # A custom call's input is the model's arguments unwrapped, and a hosted call's
            # fields are parsed from them: both are only known whole, at done.
            return None
        if kind is ItemKind.MESSAGE:
            lp = logprob_entries(event.logprobs) if event.logprobs else []
            fields = {**self._where(item), "content_index": 0, "delta": event.text, "logprobs": lp}
            return self._frame("response.output_text.delta", fields)
        if kind is ItemKind.TOOL_CALL:
            name = "mcp_call_arguments" if item.provider is not None else "function_call_arguments"
            return self._frame(f"response.{name}.delta", {**self._where(item), "delta": event.text})
        if kind is ItemKind.REASONING:
            if self.summaries:
                fields = {**self._where(item), "summary_index": 0, "delta": event.text}
                return self._frame("response.reasoning_summary_text.delta", fields)
            return self._frame(
                self.reasoning_delta, {**self._where(item), "content_index": 0, "delta": event.text}
            )
        return self._frame(
            "response.refusal.delta", {**self._where(item), "content_index": 0, "delta": event.text}
        )

    def _done(self, item: Item) -> list[Frame]:
        if is_server_result(item):
            return self._result(item)
        if is_server_call(item):
            self.running_calls[item.call_id or ""] = item
            fields = {**self._where(item), "arguments": item.text}
            return [self._frame("response.mcp_call_arguments.done", fields)]
        if item.kind is ItemKind.TOOL_LIST:
            outcome = "failed" if item.error is not None else "completed"
            return [
                self._frame(f"response.mcp_list_tools.{outcome}", self._where(item)),
                self._item_frame("response.output_item.done", item, mcp_list_tools_item(item)),
            ]
        where = self._where(item)
        final = output_item(
            item, "incomplete" if item.cut_short else "completed", self.state.request.tool_kinds
        )
        frames: list[Frame] = []
        kind = item.kind
        tool = self._client_tool(item)
        if tool is not None and tool.kind == "custom":
            text = custom_input(item.text)
            frames.append(self._frame("response.custom_tool_call_input.delta", {**where, "delta": text}))
            frames.append(self._frame("response.custom_tool_call_input.done", {**where, "input": text}))
            frames.append(self._item_frame("response.output_item.done", item, final))
            return frames
        if tool is not None and tool.kind != "function":
            frames.append(
                self._item_frame("response.output_item.added", item, {**final, "status": "in_progress"})
            )
            frames.append(self._item_frame("response.output_item.done", item, final))
            return frames
        if kind is ItemKind.MESSAGE:
            lp = final["content"][0]["logprobs"]
            frames.append(
                self._frame(
                    "response.output_text.done",
                    {**where, "content_index": 0, "text": item.text, "logprobs": lp},
                )
            )
        elif kind is ItemKind.REFUSAL:
            frames.append(
                self._frame("response.refusal.done", {**where, "content_index": 0, "refusal": item.text})
            )
        elif kind is ItemKind.REASONING and self.summaries:
            final = self._reasoning(final)
            part = final["summary"][0]
            frames.append(
                self._frame(
                    "response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": item.text}
                )
            )
            frames.append(
                self._frame(
                    "response.reasoning_summary_part.done", {**where, "summary_index": 0, "part": part}
                )
            )
            frames.append(self._item_frame("response.output_item.done", item, final))
            return frames
        elif kind is ItemKind.REASONING:
            final = self._reasoning(final)
            frames.append(self._frame(self.reasoning_done, {**where, "content_index": 0, "text": item.text}))
        elif kind is ItemKind.TOOL_CALL:
            fields = {**where, "name": item.name or "", "arguments": item.text}
            frames.append(self._frame("response.function_call_arguments.done", fields))
        if kind in (ItemKind.MESSAGE, ItemKind.REFUSAL, ItemKind.REASONING):
            part = final["content"][0]
            frames.append(
                self._frame("response.content_part.done", {**where, "content_index": 0, "part": part})
            )
        frames.append(self._item_frame("response.output_item.done", item, final))
        return frames

    def _result(self, result: Item) -> list[Frame]:
        """A server call's outcome: the call it answers is done now."""
        outcome = "failed" if result.error is not None else "completed"
        call = self.running_calls.pop(result.call_id or "", None)
        if call is not None:
            body = mcp_call_item(call, result, "in_progress")
            return [
                self._frame(f"response.mcp_call.{outcome}", self._where(call)),
                self._item_frame("response.output_item.done", call, body),
            ]
        self.output_index[result.index] = len(self.output_index)
        body = orphan_result_item(result)
        shell = {**body, "output": None, "error": None, "status": "in_progress"}
        return [
            self._item_frame("response.output_item.added", result, shell),
            self._frame("response.mcp_call.in_progress", self._where(result)),
            self._frame(f"response.mcp_call.{outcome}", self._where(result)),
            self._item_frame("response.output_item.done", result, body),
        ]

    def _close_running_calls(self) -> list[Frame]:
        """Calls the response ended without (a failure, a cancel): `incomplete`, as the final
        `output` has them."""
        frames: list[Frame] = []
        for call in self.running_calls.values():
            frames.append(self._frame("response.mcp_call.failed", self._where(call)))
            frames.append(
                self._item_frame("response.output_item.done", call, mcp_call_item(call, None, "incomplete"))
            )
        self.running_calls.clear()
        return frames

    def _finish_object(self) -> Json:
        self.state.completed_at = int(time.time())
        # The accumulator's count: the engine's final one, or what streamed when cut off.
        self.state.usage = usage_object(self.accumulator.usage_so_far())
        self.final = self.snapshot()
        return self.final

    def _finished(self, reason: FinishReason) -> list[Frame]:
        frames = self._close_running_calls()
        if reason in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER):
            self.state.status = "incomplete"
            why = "max_output_tokens" if reason is FinishReason.LENGTH else "content_filter"
            self.state.incomplete_details = {"reason": why}
            return [*frames, self._frame("response.incomplete", {"response": self._finish_object()})]
        self.state.status = "completed"
        return [*frames, self._frame("response.completed", {"response": self._finish_object()})]

    def _failed(self, error: ErrorInfo) -> list[Frame]:
        frames = self._close_running_calls()
        self.state.status = "failed"
        self.state.error = {"code": response_error_code(error), "message": error.message}
        return [*frames, self._frame("response.failed", {"response": self._finish_object()})]

    def cancelled(self, reason: str) -> list[Frame]:
        """The response was cancelled (by `/cancel` or a foreground client leaving)."""
        frames = [] if self.state.status != "queued" else self._in_progress()
        frames += self._close_running_calls()
        self.state.status = "cancelled"
        self.state.incomplete_details = {"reason": reason}
        return [*frames, self._frame("response.incomplete", {"response": self._finish_object()})]


def _empty_part(kind: ItemKind) -> Json | None:
    if kind is ItemKind.MESSAGE:
        return {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    if kind is ItemKind.REFUSAL:
        return {"type": "refusal", "refusal": ""}
    if kind is ItemKind.REASONING:
        return {"type": "reasoning_text", "text": ""}
    return None
