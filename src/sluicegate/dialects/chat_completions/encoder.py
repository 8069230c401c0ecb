"""Chat Completions encoding: canonical events → `chat.completion.chunk` frames, and the
non-streaming `chat.completion` body from the accumulated result.

The encoder is a small state machine with the envelope precomputed as bytes, so a token costs
one orjson call on its delta. Wire details follow `specs/chat-completions-streaming.md` and
what the `openai` SDK's `chat.completions.stream()` helper requires: `role` only in the first
delta, a tool call's `id`/`type`/`name` only in its first delta, `index` on every tool delta.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson

from sluicegate.core.accumulate import ChatResult
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemKind,
    PromptProgress,
    TokenLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import DONE, Frame
from sluicegate.dialects.fingerprint import SYSTEM_FINGERPRINT
from sluicegate.dialects.openai_errors import openai_error

if TYPE_CHECKING:
    from sluicegate.dialects.base import EncoderContext, Turn

ReasoningField = Literal["reasoning_content", "reasoning", "both"]
# Items of tools the server runs itself (tool loop): not part of this dialect.
SERVER_SIDE = frozenset({ItemKind.TOOL_RESULT, ItemKind.TOOL_LIST, ItemKind.APPROVAL_REQUEST})
# Read per token, `Final`: compiled, C statics, not a module dict's (or module's) lookup each.
_MESSAGE: Final = ItemKind.MESSAGE  # (an enum member lookup costs ~100 ns in Python 3.11)
_REFUSAL: Final = ItemKind.REFUSAL
_TOOL_CALL: Final = ItemKind.TOOL_CALL
_dumps: Final = orjson.dumps
# The opening delta's three forms, encoded once (a stream's first chunk: no dict, no orjson call).
_ROLE_MESSAGE = b'{"role":"assistant","content":""}'
_ROLE_REFUSAL = b'{"role":"assistant","content":null,"refusal":""}'
_ROLE_NOTHING = b'{"role":"assistant","content":null}'
# Where a chunk's head ends in the per-token head, and a chunk's tail starts in the per-token tail.
_BEFORE_CONTENT = -len(b'{"content":')
_AFTER_LOGPROBS = len(b'},"logprobs":null')


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": usage.audio_tokens},
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": usage.accepted_prediction_tokens,
            "rejected_prediction_tokens": usage.rejected_prediction_tokens,
        },
    }


def usage_bytes(usage: Usage) -> bytes:
    """`orjson.dumps(usage_body(usage))`, written in one piece: a stream's finish chunk made
    three dicts and an orjson call for it (~7 k instructions a stream, compiled); one
    formatting of eight ints is one bytes object. tests/unit/dialects/test_chat_encoder.py
    holds it to orjson's bytes."""
    return (
        b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,'
        b'"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":%d},'
        b'"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,'
        b'"accepted_prediction_tokens":%d,"rejected_prediction_tokens":%d}}'
        % (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            usage.cached_tokens,
            usage.audio_tokens,
            usage.reasoning_tokens,
            usage.accepted_prediction_tokens,
            usage.rejected_prediction_tokens,
        )
    )


def logprobs_body(entries: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes,
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in e.top],
        }
        for e in entries
    ]


def reasoning_keys(field: ReasoningField) -> tuple[str, ...]:
    return ("reasoning_content", "reasoning") if field == "both" else (field,)


def encoder_for(
    turn: Turn, context: EncoderContext, reasoning_field: ReasoningField, choice: int | None
) -> ChatCompletionsEncoder:
    """The response's encoder, or (`choice`) that of one of `n` > 1 choices: its index, no
    usage at its finish (the request's is summed once), no prompt progress or `__verbose`.
    Here, compiled, so that the dialect's call passes four arguments: the encoder's twelve,
    eight of them keywords, parsed from an interpreted call cost ~6 k instructions a stream."""
    options: Any = turn.request  # the dialect's `ChatOptions`
    alone = choice is None
    return ChatCompletionsEncoder(
        context.turn_id,
        context.created,
        turn.chat.model,
        include_usage=options.include_usage,
        logprobs=turn.chat.sampling.logprobs,
        system_fingerprint=SYSTEM_FINGERPRINT,
        reasoning_field=reasoning_field,
        index=choice or 0,
        usage_at_finish=alone,
        return_progress=alone and options.return_progress,
        prompt_text=context.prompt_text if alone and options.verbose else None,
    )


class ChatCompletionsEncoder:
    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        *,
        include_usage: bool,
        logprobs: bool,
        reasoning_field: ReasoningField = "reasoning_content",
        index: int = 0,
        usage_at_finish: bool = True,
        system_fingerprint: str | None = None,
        return_progress: bool = False,
        prompt_text: Callable[[], str | None] | None = None,
    ) -> None:
        """`index`: the choice this encoder's chunks belong to (`n` > 1, `dialects/choices.py`);
        `usage_at_finish`: False for such a choice, whose usage the request sums once.
        `return_progress`: llama-server's `prompt_progress` chunks while the prompt is read."""
        envelope = orjson.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": None,
                "system_fingerprint": system_fingerprint,
            }
        )
        self.system_fingerprint = system_fingerprint
        self.prompt_text = prompt_text  # llama-server's `verbose`: `__verbose` in the body
        # A text stream keeps only its per-token frame's two ends (each bytes object is an
        # allocation a held stream keeps): the envelope (`_open`) and the generic chunk's head and
        # tail are sliced from them when used, and the head is kept once a non-text delta (reasoning,
        # a tool call, a refusal, logprobs) needs it per token. Slices, not `envelope` itself: an
        # orjson result holds a 4 KiB buffer for as long as it lives.
        open_ = envelope[:-1]
        self._open_end = len(open_)
        self._content_head = open_ + b',"choices":[{"index":%d,"delta":{"content":' % index
        self._content_tail = b'},"logprobs":null,"finish_reason":null}]' + (
            b',"usage":null}' if include_usage else b"}"
        )
        self._head_kept: bytes | None = None
        self.completion_id, self.created, self.model = completion_id, created, model
        self.reasoning_field = reasoning_field
        self.include_usage = include_usage
        self.usage_at_finish = usage_at_finish
        self.index = index
        self.logprobs = logprobs
        self.reasoning_keys = reasoning_keys(reasoning_field)
        self.started = False
        self.usage = Usage()
        self.return_progress = return_progress
        self._progress_since: float | None = None  # when the first progress report went out

    @property
    def _open(self) -> bytes:
        """The envelope's fields, without the closing brace."""
        return self._content_head[: self._open_end]

    @property
    def _tail(self) -> bytes:
        """After a chunk's `logprobs`: `finish_reason`, `usage`, the closing brackets."""
        return self._content_tail[_AFTER_LOGPROBS:]

    def _head(self) -> bytes:
        """A chunk's bytes up to its delta: kept once a stream needs it per token."""
        head = self._head_kept
        if head is None:
            head = self._head_kept = self._content_head[:_BEFORE_CONTENT]
        return head

    def _chunk(self, delta: dict[str, Any], logprobs: dict[str, Any] | None = None) -> Frame:
        lp = b"null" if logprobs is None else orjson.dumps(logprobs)
        return Frame(self._head() + orjson.dumps(delta) + b',"logprobs":' + lp + self._tail)

    def _role_chunk(self, first: Item | None) -> Frame:
        self.started = True
        if first is not None and first.kind is _REFUSAL:
            delta = _ROLE_REFUSAL
        elif first is not None and first.kind is _MESSAGE:
            delta = _ROLE_MESSAGE
        else:
            # No message (yet): reasoning first, or nothing at all. `content: ""` here would make
            # SDK accumulators end with "" where the non-streaming body has null.
            delta = _ROLE_NOTHING
        # Once a stream: sliced, not kept.
        return Frame(self._content_head[:_BEFORE_CONTENT] + delta + b',"logprobs":null' + self._tail)

    def opening(self) -> list[Frame]:
        return []

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token: before the match's class checks
            frame = self._delta(event)
            return [frame] if frame is not None else []
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # (~250 instructions a case tried), `isinstance` of one of our classes a type compare.
        if isinstance(event, ItemAdded):
            frame = self._added(event.item)
            return [frame] if frame is not None else []
        if isinstance(event, UsageReport):
            self.usage = event.usage
        elif isinstance(event, PromptProgress):
            return self._progress(event) if self.return_progress and event.total else []
        elif isinstance(event, Finished):
            return self._finish(event.reason.value)
        elif isinstance(event, Failed):
            return [Frame(orjson.dumps(openai_error(event.error)), "error")]
        return []

    def _progress(self, event: PromptProgress) -> list[Frame]:
        """llama-server's report: the prompt's tokens, those the cache held, those read so far
        and the milliseconds since the first report (which says what the cache held)."""
        frames: list[Frame] = []
        if self._progress_since is None:
            self._progress_since = time.monotonic()
            if event.processed > event.cached:
                frames.append(self._progress_chunk(event.total, event.cached, event.cached))
        frames.append(self._progress_chunk(event.total, event.cached, event.processed))
        return frames

    def _progress_chunk(self, total: int, cache: int, processed: int) -> Frame:
        since = self._progress_since or time.monotonic()
        report = {
            "total": total,
            "cache": cache,
            "processed": processed,
            "time_ms": int((time.monotonic() - since) * 1000),
        }
        return Frame(self._open + b',"choices":[],"prompt_progress":' + orjson.dumps(report) + b"}")

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return [DONE]

    def _added(self, item: Item) -> Frame | None:
        if item.kind in SERVER_SIDE or item.provider is not None:
            return None  # the server runs its own tools: the client sees their text rounds only
        if item.kind is _TOOL_CALL:
            call = {
                "index": item.tool_index,
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name or "", "arguments": ""},
            }
            if self.started:
                return self._chunk({"tool_calls": [call]})
            self.started = True
            return self._chunk({"role": "assistant", "content": None, "tool_calls": [call]})
        if self.started:
            return None
        return self._role_chunk(item)

    def _delta(self, event: ItemDelta) -> Frame | None:
        item = event.item
        kind = item.kind
        if kind is _MESSAGE:
            if not self.logprobs:
                return Frame(self._content_head + _dumps(event.text) + self._content_tail)
            content_lp = {"content": logprobs_body(event.logprobs or []), "refusal": None}
            return self._chunk({"content": event.text}, content_lp)
        if kind is ItemKind.REASONING:
            return self._chunk(dict.fromkeys(self.reasoning_keys, event.text))
        if kind is ItemKind.TOOL_CALL and item.provider is None:
            return self._chunk(
                {"tool_calls": [{"index": item.tool_index, "function": {"arguments": event.text}}]}
            )
        if kind is ItemKind.REFUSAL:
            lp = {"content": None, "refusal": logprobs_body(event.logprobs or [])} if self.logprobs else None
            return self._chunk({"refusal": event.text}, lp)
        return None

    def _finish(self, reason: str) -> list[Frame]:
        head = [] if self.started else [self._role_chunk(None)]
        choice = (
            b',"choices":[{"index":'
            + b"%d" % self.index
            + b',"delta":{},"logprobs":null,"finish_reason":"'
            + reason.encode()
            + b'"}]'
        )
        usage = b""
        if self.include_usage:
            usage = b',"usage":' + (usage_bytes(self.usage) if self.usage_at_finish else b"null")
        return [*head, Frame(self._open + choice + usage + b"}")]

    def body(self, result: ChatResult) -> dict[str, Any]:
        body = completion_body(
            result,
            completion_id=self.completion_id,
            created=self.created,
            model=self.model,
            logprobs=self.logprobs,
            reasoning_field=self.reasoning_field,
            index=self.index,
            system_fingerprint=self.system_fingerprint,
        )
        if self.prompt_text is not None:
            body["__verbose"] = verbose_body(result, self.model, self.prompt_text())
        return body

    def usage_chunk(self, usage: Usage) -> Frame:
        """The chunk with no choices that carries a request's summed usage (`n` > 1)."""
        return Frame(self._open + b',"choices":[],"usage":' + orjson.dumps(usage_body(usage)) + b"}")

    def response_object(self) -> dict[str, Any] | None:
        return None


def verbose_body(result: ChatResult, model: str, prompt: str | None) -> dict[str, Any]:
    """llama-server's `__verbose`: the answer as its own `/completion` would give it, with the
    prompt the chat template rendered (empty for an engine that renders none)."""
    text = result.text_of(ItemKind.MESSAGE) or ""
    usage = result.usage
    return {
        "content": text,
        "model": model,
        "prompt": prompt or "",
        "stop": True,
        "stop_type": "limit" if result.finish_reason is FinishReason.LENGTH else "eos",
        "tokens_predicted": usage.completion_tokens,
        "tokens_evaluated": usage.prompt_tokens,
        "tokens_cached": usage.cached_tokens,
        "has_new_line": "\n" in text,
    }


def completion_body(
    result: ChatResult,
    *,
    completion_id: str,
    created: int,
    model: str,
    logprobs: bool,
    reasoning_field: ReasoningField = "reasoning_content",
    index: int = 0,
    system_fingerprint: str | None = None,
) -> dict[str, Any]:
    """The non-streaming `chat.completion` object, from the same accumulator as streams."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": result.text_of(ItemKind.MESSAGE),
        "refusal": result.text_of(ItemKind.REFUSAL),
    }
    calls = [c for c in result.of_kind(ItemKind.TOOL_CALL) if c.provider is None]
    if calls:
        message["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name or "", "arguments": c.text},
            }
            for c in calls
        ]
    reasoning = result.text_of(ItemKind.REASONING)
    if reasoning is not None:
        for key in reasoning_keys(reasoning_field):
            message[key] = reasoning
    choice_logprobs = None
    if logprobs:
        content = [lp for i in result.of_kind(ItemKind.MESSAGE) for lp in i.logprobs]
        refusal = [lp for i in result.of_kind(ItemKind.REFUSAL) for lp in i.logprobs]
        choice_logprobs = {
            "content": logprobs_body(content) if content or not refusal else None,
            "refusal": logprobs_body(refusal) if refusal else None,
        }
    finish = result.finish_reason.value if result.finish_reason else "stop"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "message": message, "logprobs": choice_logprobs, "finish_reason": finish}
        ],
        "usage": usage_body(result.usage),
        "service_tier": None,
        "system_fingerprint": system_fingerprint,
    }
