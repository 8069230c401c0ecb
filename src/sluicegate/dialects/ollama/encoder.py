"""Ollama encoding: canonical events → NDJSON chunk objects, and the non-streaming body.

A chat chunk is `{"model","created_at","message":{"role":"assistant","content":…},"done":false}`
(`/api/generate`: `"response":…` instead of `message`); reasoning goes in `thinking`; a tool
call goes out whole, once it is done, with `arguments` as a JSON object. The last line has
`done: true`, `done_reason` and the counts and durations (nanoseconds) Ollama reports. An
error mid-stream is one `{"error": …}` line and the stream ends. The per-token frame is the
envelope's bytes around one orjson call on the text.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemDelta,
    ItemDone,
    ItemKind,
)
from sluicegate.core.frames import Frame
from sluicegate.dialects.ollama.errors import ollama_error

Json = dict[str, Any]
_MESSAGE = ItemKind.MESSAGE  # per token: an enum member lookup costs ~100 ns in Python 3.11
_NS = 1_000_000_000


def now_iso() -> str:
    """Ollama's `created_at`: RFC 3339 with a fraction of a second."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def tool_call_body(item: Item) -> Json:
    """One call, complete: Ollama's `arguments` is an object, never JSON text."""
    try:
        arguments = json.loads(item.text) if item.text.strip() else {}
    except ValueError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return {
        "id": item.call_id,
        "function": {"index": item.tool_index or 0, "name": item.name or "", "arguments": arguments},
    }


def done_reason(reason: FinishReason | None) -> str:
    return "length" if reason is FinishReason.LENGTH else "stop"


class OllamaEncoder:
    def __init__(self, model: str, accumulator: Accumulator, *, generate: bool) -> None:
        self.model = model
        self.generate = generate
        self.accumulator = accumulator
        self.started_ns = time.perf_counter_ns()
        self.created_at = now_iso()
        # The envelope (`_open`, used at the finish) is sliced from the per-token head, not kept
        # beside it for a stream's life.
        open_ = b'{"model":' + orjson.dumps(model) + b',"created_at":' + orjson.dumps(self.created_at)
        self._open_end = len(open_)
        if generate:
            self._text_head = open_ + b',"response":'
            self._text_tail = b',"done":false}'
        else:
            self._text_head = open_ + b',"message":{"role":"assistant","content":'
            self._text_tail = b'},"done":false}'

    @property
    def _open(self) -> bytes:
        return self._text_head[: self._open_end]

    # --- streaming ---------------------------------------------------------------------------

    def opening(self) -> list[Frame]:
        return []

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token: before the match's class checks
            frame = self._delta(event)
            return [frame] if frame is not None else []
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # per case tried, `isinstance` of one of our classes a type compare (docs/compiled.md).
        if isinstance(event, ItemDone):
            item = event.item
            if item.kind is ItemKind.TOOL_CALL and item.provider is None:
                return [self._chunk({"tool_calls": [tool_call_body(item)]})]
        elif isinstance(event, Finished):
            return [Frame(orjson.dumps(self._final(event.reason)))]
        elif isinstance(event, Failed):
            return [Frame(orjson.dumps(ollama_error(event.error)))]
        return []

    def cancelled(self, reason: str) -> list[Frame]:
        return []  # Ollama has no cancelled ending: the stream just ends

    def closing(self) -> list[Frame]:
        return []  # no end sentinel: the `done: true` line was the end

    def _delta(self, event: ItemDelta) -> Frame | None:
        kind = event.item.kind
        if kind is _MESSAGE or kind is ItemKind.REFUSAL:
            return Frame(self._text_head + orjson.dumps(event.text) + self._text_tail)
        if kind is ItemKind.REASONING:
            return self._chunk({"thinking": event.text})
        return None  # tool-call arguments go out whole, when the call is done

    def _chunk(self, fields: Json) -> Frame:
        if self.generate:
            body = {"response": "", **fields, "done": False}
        else:
            body = {"message": {"role": "assistant", "content": "", **fields}, "done": False}
        return Frame(self._open + b"," + orjson.dumps(body)[1:])

    def _final(self, reason: FinishReason | None, message: Json | None = None) -> Json:
        result = self.accumulator.result
        usage = self.accumulator.usage_so_far()
        body: Json = {"model": self.model, "created_at": now_iso()}
        if self.generate:
            body["response"] = (message or {}).get("content", "")
            if message and message.get("thinking") is not None:
                body["thinking"] = message["thinking"]
        else:
            body["message"] = message or {"role": "assistant", "content": ""}
        load = result.load_seconds or 0.0
        prompt = result.time_to_first_token or 0.0
        body |= {
            "done": True,
            "done_reason": done_reason(reason),
            "total_duration": time.perf_counter_ns() - self.started_ns,
            "load_duration": int(load * _NS),
            "prompt_eval_count": usage.prompt_tokens,
            "prompt_eval_duration": int(prompt * _NS),
            "eval_count": usage.completion_tokens,
            "eval_duration": int(result.generation_seconds * _NS),
        }
        return body

    # --- whole -------------------------------------------------------------------------------

    def body(self, result: ChatResult) -> Json:
        message: Json = {"role": "assistant", "content": result.text_of(ItemKind.MESSAGE) or ""}
        refusal = result.text_of(ItemKind.REFUSAL)
        if refusal and not message["content"]:
            message["content"] = refusal
        thinking = result.text_of(ItemKind.REASONING)
        if thinking is not None:
            message["thinking"] = thinking
        calls = [c for c in result.of_kind(ItemKind.TOOL_CALL) if c.provider is None]
        if calls:
            message["tool_calls"] = [tool_call_body(c) for c in calls]
        return self._final(result.finish_reason, message)

    def response_object(self) -> Json | None:
        return None
