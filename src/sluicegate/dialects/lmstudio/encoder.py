"""LM Studio REST v1 encoding: canonical events → named `/api/v1/chat` events, the chat result
body (also `chat.end.result`), and LM Studio's error shape.

Order on the wire: `chat.start` → `model_load.*` (only when this request loaded the model) →
`prompt_processing.*` → reasoning / tool call / message blocks in generation order → `error`
(if any) → `chat.end`. Two vocabularies for tool results: the current one
(`tool_call.success` / `tool_call.failure`) and the earlier one (`tool_call.result`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import orjson

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    PromptFinished,
    PromptProgress,
    PromptStarted,
)
from sluicegate.core.frames import Frame

if TYPE_CHECKING:
    from sluicegate.dialects.base import EncoderContext, Turn

Json = dict[str, Any]
Vocabulary = Literal["current", "v0"]
# provider_info for a tool name, or None when no provider offers that tool
ToolProviders = Callable[[str], Json | None]

LMSTUDIO_ERROR_TYPE = {
    ErrorKind.INVALID_REQUEST: "invalid_request",
    ErrorKind.AUTHENTICATION: "invalid_request",
    ErrorKind.NOT_FOUND: "invalid_request",
    ErrorKind.PAYLOAD_TOO_LARGE: "invalid_request",
    ErrorKind.RATE_LIMITED: "unknown",
    ErrorKind.OVERLOADED: "unknown",
    ErrorKind.NOT_IMPLEMENTED: "not_implemented",
    ErrorKind.TIMEOUT: "internal_error",
    ErrorKind.IDLE_TIMEOUT: "internal_error",
    ErrorKind.ENGINE: "internal_error",
    ErrorKind.UPSTREAM: "internal_error",
    ErrorKind.CANCELLED: "unknown",
    ErrorKind.INTERNAL: "internal_error",
}
_CODE_TYPES = {"model_not_found": "model_not_found", "job_not_found": "job_not_found"}
_DEFAULT_CODES = {
    ErrorKind.TIMEOUT: "timeout",
    ErrorKind.IDLE_TIMEOUT: "stream_idle_timeout",
    ErrorKind.CANCELLED: "cancelled",
}


def lmstudio_error_payload(info: ErrorInfo) -> Json:
    error: Json = {
        "type": _CODE_TYPES.get(info.code or "", LMSTUDIO_ERROR_TYPE[info.kind]),
        "message": info.message,
    }
    code = info.code or _DEFAULT_CODES.get(info.kind)
    if code:
        error["code"] = code
    if info.param:
        error["param"] = info.param
    return error


def lmstudio_error(info: ErrorInfo) -> Json:
    return {"error": lmstudio_error_payload(info)}


def no_tools(name: str) -> Json | None:
    return None


def _arguments(text: str) -> Any:
    try:
        return orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return None


def output_items(items: list[Item], providers: ToolProviders) -> list[Json]:
    results = {item.call_id: item for item in items if item.kind is ItemKind.TOOL_RESULT}
    out: list[Json] = []
    for item in items:
        if item.kind is ItemKind.REASONING:
            out.append({"type": "reasoning", "content": item.text_so_far})
        elif item.kind in (ItemKind.MESSAGE, ItemKind.REFUSAL):
            out.append({"type": "message", "content": item.text_so_far})
        elif item.kind is ItemKind.TOOL_CALL:
            failure = tool_failure(item, providers)
            result = results.get(item.call_id)
            if failure is None and result is not None:
                failure = result_failure(item, result)
            if failure is not None:
                reason, metadata = failure
                out.append({"type": "invalid_tool_call", "reason": reason, "metadata": metadata})
            elif result is not None:
                out.append(
                    {
                        "type": "tool_call",
                        "tool": item.name,
                        "arguments": _arguments(item.text_so_far),
                        "output": result.text,
                        "provider_info": _provider_info(result),
                    }
                )
        # a call still without its result (cut short) is left out, as LM Studio has no such item
    return out


def _provider_info(item: Item) -> Json | None:
    return item.provider.lmstudio() if item.provider is not None else None


def result_failure(call: Item, result: Item) -> tuple[str, Json] | None:
    """A call that was well-formed but did not succeed (failed the tool's schema, the tool
    raised, timed out or its server died). LM Studio's failure types are only `invalid_name`
    and `invalid_arguments`; this is the latter, and `reason` says what actually happened."""
    if result.error is None:
        return None
    metadata = {
        "type": "invalid_arguments",
        "tool_name": call.name or "",
        "arguments": _arguments(call.text_so_far),
        "provider_info": _provider_info(result),
    }
    return result.error, metadata


def tool_failure(item: Item, providers: ToolProviders) -> tuple[str, Json] | None:
    """Why a model's tool call cannot run, as LM Studio reports it; None when it can."""
    name = item.name or ""
    provider = providers(name)
    if provider is None:
        return f"Cannot find tool with name {name}.", {"type": "invalid_name", "tool_name": name}
    arguments = _arguments(item.text_so_far)
    if not isinstance(arguments, dict):
        return (
            f"Failed to parse arguments for tool {name}.",
            {"type": "invalid_arguments", "tool_name": name, "arguments": {}, "provider_info": provider},
        )
    return None


def chat_result_body(
    result: ChatResult,
    items: list[Item],
    *,
    instance_id: str,
    response_id: str | None,
    providers: ToolProviders = no_tools,
) -> Json:
    usage = result.usage
    stats: Json = {
        "input_tokens": usage.prompt_tokens,
        "total_output_tokens": usage.completion_tokens,
        "reasoning_output_tokens": usage.reasoning_tokens,
        "tokens_per_second": round(result.tokens_per_second, 3),
        "time_to_first_token_seconds": round(result.time_to_first_token or 0.0, 3),
    }
    if result.load_seconds is not None:
        stats["model_load_time_seconds"] = round(result.load_seconds, 3)
    body: Json = {"model_instance_id": instance_id, "output": output_items(items, providers), "stats": stats}
    if response_id is not None:
        body["response_id"] = response_id
    return body


_REASONING, _TOOL_CALL = ItemKind.REASONING, ItemKind.TOOL_CALL  # an enum lookup is ~100 ns in 3.11
_MESSAGE_DELTA = b'{"type":"message.delta","content":'
_REASONING_DELTA = b'{"type":"reasoning.delta","content":'


def _frame(kind: str, fields: Json | None = None) -> Frame:
    payload = {"type": kind, **fields} if fields else {"type": kind}
    return Frame(orjson.dumps(payload), kind)


def encoder_for(turn: Turn, context: EncoderContext) -> LMStudioEncoder:
    """The response's encoder. Here, compiled, so that the dialect's call passes two arguments:
    the encoder's five, three of them keywords, parsed by name from an interpreted call per
    stream (as Chat Completions' `encoder_for`)."""
    return LMStudioEncoder(
        context.instance_id,
        context.accumulator,
        response_id=context.turn_id if turn.store else None,
        vocabulary=turn.request.vocabulary,
        providers=context.provider_info,
    )


class LMStudioEncoder:
    def __init__(
        self,
        instance_id: str,
        accumulator: Accumulator,
        *,
        response_id: str | None,
        vocabulary: Vocabulary = "current",
        providers: ToolProviders = no_tools,
    ) -> None:
        self.instance_id = instance_id
        self.accumulator = accumulator
        self.response_id = response_id
        self.vocabulary = vocabulary
        self.providers = providers
        self.result: Json | None = None  # chat.end's result, once sent
        self.calls: dict[str | None, Item] = {}  # server-side calls awaiting their result

    def opening(self) -> list[Frame]:
        return [_frame("chat.start", {"model_instance_id": self.instance_id})]

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return []

    def response_object(self) -> Json | None:
        return None  # stored in the Responses shape by the conversation package

    def body(self, result: ChatResult | None = None) -> Json:
        return chat_result_body(
            self.accumulator.result,
            self.accumulator.snapshot(),
            instance_id=self.instance_id,
            response_id=self.response_id,
            providers=self.providers,
        )

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token: one bytes template, no dict
            kind = event.item.kind
            if kind is _REASONING:
                return [Frame(_REASONING_DELTA + orjson.dumps(event.text) + b"}", "reasoning.delta")]
            if kind is _TOOL_CALL:
                return []
            return [Frame(_MESSAGE_DELTA + orjson.dumps(event.text) + b"}", "message.delta")]
        frame = self._encode(event)
        if frame is None:
            return []
        return frame if isinstance(frame, list) else [frame]

    def _encode(self, event: Event) -> Frame | list[Frame] | None:
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # per case tried, `isinstance` of one of our classes a type compare (docs/compiled.md).
        if isinstance(event, ItemDelta):
            item = event.item
            kind = "reasoning.delta" if item.kind is ItemKind.REASONING else "message.delta"
            return None if item.kind is ItemKind.TOOL_CALL else _frame(kind, {"content": event.text})
        if isinstance(event, ItemAdded):
            return self._added(event.item)
        if isinstance(event, ItemDone):
            return self._done(event.item)
        if isinstance(event, PromptStarted):
            return _frame("prompt_processing.start")
        if isinstance(event, PromptProgress):
            return _frame("prompt_processing.progress", {"progress": event.progress})
        if isinstance(event, PromptFinished):
            return _frame("prompt_processing.end")
        if isinstance(event, LoadStarted):
            return _frame("model_load.start", {"model_instance_id": self.instance_id})
        if isinstance(event, LoadProgress):
            return _frame(
                "model_load.progress", {"model_instance_id": self.instance_id, "progress": event.progress}
            )
        if isinstance(event, LoadFinished):
            fields = {"model_instance_id": self.instance_id, "load_time_seconds": round(event.seconds, 3)}
            return _frame("model_load.end", fields)
        if isinstance(event, Finished):
            return self.end()
        if isinstance(event, Failed):
            if event.unstored:  # the store failed: the id would answer 404 for ever
                self.response_id = None
            return [_frame("error", {"error": lmstudio_error_payload(event.error)}), self.end()]
        return None

    def end(self) -> Frame:
        self.result = self.body()
        return _frame("chat.end", {"result": self.result})

    def _added(self, item: Item) -> Frame | None:
        if item.kind is ItemKind.REASONING:
            return _frame("reasoning.start")
        if item.kind in (ItemKind.MESSAGE, ItemKind.REFUSAL):
            return _frame("message.start")
        if item.kind is ItemKind.TOOL_CALL and (provider := self.providers(item.name or "")) is not None:
            return _frame("tool_call.start", {"tool": item.name, "provider_info": provider})
        return None

    def _done(self, item: Item) -> Frame | None:
        if item.kind is ItemKind.REASONING:
            return _frame("reasoning.end")
        if item.kind in (ItemKind.MESSAGE, ItemKind.REFUSAL):
            return _frame("message.end")
        if item.kind is ItemKind.TOOL_RESULT:
            return self._result(item)
        if item.kind is not ItemKind.TOOL_CALL:
            return None
        failure = tool_failure(item, self.providers)
        if failure is None:
            self.calls[item.call_id] = item
            provider = self.providers(item.name or "")
            args = _arguments(item.text)
            return _frame(
                "tool_call.arguments", {"tool": item.name, "arguments": args, "provider_info": provider}
            )
        reason, metadata = failure
        if self.vocabulary == "v0":
            # The earlier vocabulary has no failure event: the reason is the call's output.
            fields = {
                "tool": item.name,
                "arguments": _arguments(item.text) or {},
                "output": reason,
                "provider_info": None,
            }
            return _frame("tool_call.result", fields)
        return _frame("tool_call.failure", {"reason": reason, "metadata": metadata})

    def _result(self, result: Item) -> Frame | None:
        """A server-side call's outcome; calls that failed on their own were reported already."""
        call = self.calls.pop(result.call_id, None)
        if call is None:
            return None
        failure = result_failure(call, result)
        if failure is not None and self.vocabulary == "current":
            reason, metadata = failure
            return _frame("tool_call.failure", {"reason": reason, "metadata": metadata})
        fields = {
            "tool": call.name,
            "arguments": _arguments(call.text),
            "output": result.text,
            "provider_info": _provider_info(result),
        }
        return _frame("tool_call.success" if self.vocabulary == "current" else "tool_call.result", fields)
