"""Anthropic Messages encoding: canonical events → SSE frames, the non-streaming `message`
body from the accumulated result, and Anthropic's error shape and statuses.

Stream order, as Anthropic sends it: `message_start`, then per content block
`content_block_start` / `content_block_delta`… / `content_block_stop`, then `message_delta`
(stop reason, cumulative usage) and `message_stop`. A thinking block gets one `signature_delta`
just before its stop. A failure ends the stream with one `error` event and nothing after it
(Claude Code then retries without streaming); a block cut off by that failure gets no
`content_block_stop`, so no client runs a tool call whose input was cut off.

Server-side tools (MCP, plugins) run in the tool loop; their calls and results are not part of
this dialect, so the client sees only its own `tool_use` blocks.
"""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.accumulate import ChatResult
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
from sluicegate.core.frames import Frame
from sluicegate.dialects.anthropic.signature import ThinkingSigner

SERVER_SIDE = frozenset({ItemKind.TOOL_RESULT, ItemKind.TOOL_LIST, ItemKind.APPROVAL_REQUEST})

# (error type, HTTP status) per canonical kind, as Anthropic's errors page lists them.
ANTHROPIC_ERROR: dict[ErrorKind, tuple[str, int]] = {
    ErrorKind.INVALID_REQUEST: ("invalid_request_error", 400),
    ErrorKind.AUTHENTICATION: ("authentication_error", 401),
    ErrorKind.NOT_FOUND: ("not_found_error", 404),
    ErrorKind.PAYLOAD_TOO_LARGE: ("request_too_large", 413),
    ErrorKind.RATE_LIMITED: ("rate_limit_error", 429),
    ErrorKind.OVERLOADED: ("overloaded_error", 529),
    ErrorKind.NOT_IMPLEMENTED: ("invalid_request_error", 400),
    ErrorKind.TIMEOUT: ("timeout_error", 504),
    ErrorKind.IDLE_TIMEOUT: ("timeout_error", 504),
    ErrorKind.ENGINE: ("api_error", 500),
    ErrorKind.UPSTREAM: ("api_error", 500),
    ErrorKind.CANCELLED: ("api_error", 499),
    ErrorKind.INTERNAL: ("api_error", 500),
}

STOP_REASON = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
}


# Anthropic's keep-alive event: sent while nothing else is (the transport's heartbeat).
PING = Frame(b'{"type":"ping"}', "ping")


def anthropic_error(info: ErrorInfo) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ANTHROPIC_ERROR[info.kind][0], "message": info.message}}


def anthropic_status(info: ErrorInfo) -> int:
    return ANTHROPIC_ERROR[info.kind][1]


def usage_body(usage: Usage) -> dict[str, int]:
    """Anthropic counts cached prompt tokens apart: `input_tokens` excludes them."""
    return {
        "input_tokens": max(usage.prompt_tokens - usage.cached_tokens, 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
    }


def stop_reason(reason: FinishReason | None, refused: bool) -> str:
    if refused:
        return "refusal"
    return STOP_REASON.get(reason or FinishReason.STOP, "end_turn")


def _client_item(item: Item) -> bool:
    return item.kind not in SERVER_SIDE and item.provider is None


def _frame(event: str, body: dict[str, Any]) -> Frame:
    # Copied to its own size: orjson's output keeps a 4 KiB buffer however short it is, and a
    # frame may wait in a slow reader's outbox (13-17 MB per stalled stream, once).
    return Frame(bytes(memoryview(orjson.dumps(body))), event)


# Per token: one bytes template, no dict (and no orjson buffer kept; see `_frame`).
_DELTA_HEAD = b'{"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":'
_DELTA_FIELDS = {
    ItemKind.REASONING: (b"thinking_delta", b"thinking"),
    ItemKind.TOOL_CALL: (b"input_json_delta", b"partial_json"),
}
_TEXT_DELTA = (b"text_delta", b"text")


class AnthropicEncoder:
    """One response's state machine (the `Encoder` of dialects/base.py): `encode` returns the
    frames for one canonical event, `body` the non-streaming message."""

    def __init__(
        self, message_id: str, model: str, signer: ThinkingSigner, *, omit_thinking: bool = False
    ) -> None:
        self.message_id = message_id
        self.model = model
        self.signer = signer
        self.omit_thinking = omit_thinking
        self.started = False
        self.usage = Usage()
        self.blocks = 0  # content blocks opened so far: the next block's index
        self.index_of: dict[int, int] = {}  # item index → block index
        self.refused = False
        # Blocks closed by a limit or a failure: stopped only if the stream does not fail.
        self.held: list[Frame] = []

    def opening(self) -> list[Frame]:
        return []  # message_start waits for the first block, so it can carry the prompt's usage

    def closing(self) -> list[Frame]:
        return []  # no end-of-stream sentinel in this dialect

    def cancelled(self, reason: str) -> list[Frame]:
        """Cancelled by the server (shutdown): an `error` event, the dialect's only bad ending."""
        self.held.clear()
        info = ErrorInfo(ErrorKind.CANCELLED, f"The response was cancelled ({reason}).")
        return [_frame("error", anthropic_error(info))]

    def body(self, result: ChatResult) -> dict[str, Any]:
        return message_body(
            result,
            message_id=self.message_id,
            model=self.model,
            signer=self.signer,
            omit_thinking=self.omit_thinking,
        )

    def response_object(self) -> dict[str, Any] | None:
        return None  # nothing of this dialect is stored

    def encode(self, event: Event) -> list[Frame]:
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # per case tried, `isinstance` of one of our classes a type compare (docs/compiled.md).
        if isinstance(event, ItemDelta):  # per token: first
            item, text = event.item, event.text
            block = self.index_of.get(item.index)
            if block is None or not text or (self.omit_thinking and item.kind is ItemKind.REASONING):
                return []
            return [self._delta(block, item, text)]
        if isinstance(event, ItemAdded):
            return self._added(event.item)
        if isinstance(event, ItemDone):
            return self._done(event.item)
        if isinstance(event, UsageReport):
            self.usage = event.usage
        elif isinstance(event, Finished):
            return self._finish(event.reason)
        elif isinstance(event, Failed):
            self.held.clear()  # what a failure cut off is never reported complete
            return [_frame("error", anthropic_error(event.error))]
        return []

    def _start(self) -> list[Frame]:
        if self.started:
            return []
        self.started = True
        usage = usage_body(self.usage)
        usage["output_tokens"] = 0
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return [_frame("message_start", {"type": "message_start", "message": message})]

    def _added(self, item: Item) -> list[Frame]:
        if not _client_item(item):
            return []
        frames = self._start() + self.held
        self.held = []
        block = self.blocks
        self.blocks += 1
        self.index_of[item.index] = block
        if item.kind is ItemKind.REASONING:
            content: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        elif item.kind is ItemKind.TOOL_CALL:
            content = {"type": "tool_use", "id": item.call_id, "name": item.name or "", "input": {}}
        else:
            self.refused = self.refused or item.kind is ItemKind.REFUSAL
            content = {"type": "text", "text": ""}
        frames.append(
            _frame(
                "content_block_start",
                {"type": "content_block_start", "index": block, "content_block": content},
            )
        )
        return frames

    def _delta(self, block: int, item: Item, text: str) -> Frame:
        kind, field = _DELTA_FIELDS.get(item.kind, _TEXT_DELTA)
        return Frame(_DELTA_HEAD % (block, kind, field) + orjson.dumps(text) + b"}}", "content_block_delta")

    def _done(self, item: Item) -> list[Frame]:
        block = self.index_of.get(item.index)
        if block is None:
            return []
        frames: list[Frame] = []
        if item.kind is ItemKind.REASONING:
            signature = self.signer.sign(item.text, embed=self.omit_thinking)
            delta = {"type": "signature_delta", "signature": signature}
            frames.append(
                _frame("content_block_delta", {"type": "content_block_delta", "index": block, "delta": delta})
            )
        frames.append(_frame("content_block_stop", {"type": "content_block_stop", "index": block}))
        if item.cut_short:  # a limit (sent at the finish) or a failure (never sent)
            self.held.extend(frames)
            return []
        return frames

    def _finish(self, reason: FinishReason) -> list[Frame]:
        frames = self._start() + self.held
        self.held = []
        delta = {"stop_reason": stop_reason(reason, self.refused), "stop_sequence": None}
        frames.append(
            _frame(
                "message_delta", {"type": "message_delta", "delta": delta, "usage": usage_body(self.usage)}
            )
        )
        frames.append(_frame("message_stop", {"type": "message_stop"}))
        return frames


def content_blocks(
    result: ChatResult, signer: ThinkingSigner, *, omit_thinking: bool = False
) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for item in result.items:
        if not _client_item(item):
            continue
        if item.kind is ItemKind.REASONING:
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": "" if omit_thinking else item.text,
                    "signature": signer.sign(item.text, embed=omit_thinking),
                }
            )
        elif item.kind is ItemKind.TOOL_CALL:
            blocks.append(
                {"type": "tool_use", "id": item.call_id, "name": item.name or "", "input": _input(item.text)}
            )
        else:
            blocks.append({"type": "text", "text": item.text})
    return blocks


def _input(arguments: str) -> Any:
    """A tool call's arguments as the object Anthropic's `input` is; text that is not a JSON
    object (a model's malformed call) is kept whole under one key rather than lost."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def message_body(
    result: ChatResult, *, message_id: str, model: str, signer: ThinkingSigner, omit_thinking: bool = False
) -> dict[str, Any]:
    """The non-streaming `message` object, from the same accumulator as streams."""
    refused = any(item.kind is ItemKind.REFUSAL for item in result.items)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(result, signer, omit_thinking=omit_thinking),
        "stop_reason": stop_reason(result.finish_reason, refused),
        "stop_sequence": None,
        "usage": usage_body(result.usage),
    }
