"""Streamed Anthropic Messages, as an Anthropic-compatible upstream sends them, → raw events.

Pure, no I/O: SSE frames (split by `wire.SSEReader`) in, raw canonical events out.
`thinking_delta` is reasoning, `text_delta` the message, `tool_use` blocks tool calls (their
`input_json_delta` pieces the arguments); a thinking block's `signature_delta` is remembered for
when the reasoning comes back. Usage arrives in `message_start` (input, cache read and creation)
and `message_delta` (cumulative output); it is reported once, at the end. Anthropic's server
tools (`server_tool_use`, their results) and `redacted_thinking` have no canonical form and are
skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.engines.upstream.wire import StreamEnding

STOP_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}
ERROR_KINDS = {
    "invalid_request_error": ErrorKind.INVALID_REQUEST,
    "not_found_error": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.PAYLOAD_TOO_LARGE,
    "rate_limit_error": ErrorKind.RATE_LIMITED,
    "overloaded_error": ErrorKind.OVERLOADED,
    "timeout_error": ErrorKind.TIMEOUT,
}
CLOSED_EARLY = "The upstream closed the stream before it finished (no message_stop)."


def stream_error(payload: Any) -> ErrorInfo:
    """An `error` event: `{"type": "error", "error": {"type": ..., "message": ...}}`."""
    inner = payload.get("error") if isinstance(payload, dict) else None
    inner = inner if isinstance(inner, dict) else {}
    error_type = inner.get("type")
    message = inner.get("message") if isinstance(inner.get("message"), str) else "An error occurred"
    kind = (
        ERROR_KINDS.get(error_type, ErrorKind.UPSTREAM) if isinstance(error_type, str) else ErrorKind.UPSTREAM
    )
    return ErrorInfo(kind, f"The upstream reported an error: {message}", code=error_type or "upstream_error")


def usage_of(body: dict[str, Any]) -> Usage:
    """Anthropic counts cached prompt tokens apart from `input_tokens`; ours include them."""
    cache_read = body.get("cache_read_input_tokens") or 0
    cache_write = body.get("cache_creation_input_tokens") or 0
    return Usage(
        prompt_tokens=(body.get("input_tokens") or 0) + cache_read + cache_write,
        completion_tokens=body.get("output_tokens") or 0,
        cached_tokens=cache_read,
    )


class MessagesDecoder(StreamEnding):
    """One upstream stream's state (the `StreamDecoder` of base.py)."""

    __slots__ = ("_blocks", "_remember", "_thinking", "_tools", "_usage")
    closed_early = CLOSED_EARLY  # no message_stop

    def __init__(self, remember: Callable[[str, str], None] | None = None) -> None:
        super().__init__()
        self._remember = remember  # (thinking text, signature) of each finished thinking block
        self._blocks: dict[int, tuple[str, int]] = {}  # block index → (type, tool index)
        self._thinking: dict[int, list[str]] = {}
        self._tools = 0
        self._usage: dict[str, Any] = {}

    def frame(self, event: str | None, data: bytes) -> list[RawEvent]:
        if self.over:
            return []
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            preview = data[:200].decode("utf-8", "replace")
            return self._fail(
                ErrorInfo(ErrorKind.UPSTREAM, f"The upstream sent an event that is not JSON: {preview}")
            )
        if not isinstance(body, dict):
            return []
        kind = body.get("type") or event
        if kind == "content_block_delta":
            return self._delta(body.get("index"), body.get("delta") or {})
        if kind == "content_block_start":
            return self._start(body.get("index"), body.get("content_block") or {})
        if kind == "content_block_stop":
            self._stop(body.get("index"))
        elif kind == "message_start":
            usage = (body.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                self._usage.update(usage)
        elif kind == "message_delta":
            usage = body.get("usage")
            if isinstance(usage, dict):
                self._usage.update({k: v for k, v in usage.items() if v is not None})
            reason = (body.get("delta") or {}).get("stop_reason")
            if reason:
                self.finish = STOP_REASONS.get(reason, FinishReason.STOP)
        elif kind == "message_stop":
            self.done = True
            return self._tail()
        elif kind == "error":
            return self._fail(stream_error(body))
        return []  # ping and unknown events

    def _start(self, index: Any, block: dict[str, Any]) -> list[RawEvent]:
        if not isinstance(index, int):
            return []
        block_type = block.get("type")
        if block_type == "tool_use":
            tool = self._tools
            self._tools += 1
            self._blocks[index] = ("tool_use", tool)
            out: list[RawEvent] = [
                ToolCallDelta(tool, "", block.get("id") or None, block.get("name") or None)
            ]
            initial = block.get("input")
            if isinstance(initial, dict) and initial:  # some servers send the whole input here
                out.append(ToolCallDelta(tool, orjson.dumps(initial).decode()))
            return out
        self._blocks[index] = (str(block_type), -1)
        if block_type == "thinking":
            self._thinking[index] = [block.get("thinking") or ""]
            text = block.get("thinking")
            return [TextDelta(ItemKind.REASONING, text)] if text else []
        if block_type == "text" and block.get("text"):
            return [TextDelta(ItemKind.MESSAGE, block["text"])]
        return []

    def _delta(self, index: Any, delta: dict[str, Any]) -> list[RawEvent]:
        block_type, tool = self._blocks.get(index, ("", -1)) if isinstance(index, int) else ("", -1)
        kind = delta.get("type")
        if kind == "text_delta" and block_type == "text":
            text = delta.get("text") or ""
            return [TextDelta(ItemKind.MESSAGE, text)] if text else []
        if kind == "thinking_delta" and block_type == "thinking":
            text = delta.get("thinking") or ""
            self._thinking[index].append(text)
            return [TextDelta(ItemKind.REASONING, text)] if text else []
        if kind == "input_json_delta" and block_type == "tool_use":
            piece = delta.get("partial_json") or ""
            return [ToolCallDelta(tool, piece)] if piece else []
        if kind == "signature_delta" and block_type == "thinking" and self._remember is not None:
            self._remember("".join(self._thinking.get(index, [])), delta.get("signature") or "")
        return []  # citations and server tools' deltas have no canonical form

    def _stop(self, index: Any) -> None:
        if isinstance(index, int):
            self._thinking.pop(index, None)

    def _tail(self) -> list[RawEvent]:
        out: list[RawEvent] = [UsageReport(usage_of(self._usage))] if self._usage else []
        if self.finish is not None or self.done:
            out.append(Finished(self.finish or FinishReason.STOP))
        return out

    def _fail(self, error: ErrorInfo) -> list[RawEvent]:
        self.failed = True
        out: list[RawEvent] = [UsageReport(usage_of(self._usage))] if self._usage else []
        return [*out, Failed(error)]
