"""Text completion encoding: canonical events → OpenAI `text_completion` chunks; the
non-streaming body from the accumulated result.

A completion's output is one message item of text (engines parse nothing out of it), so the
encoder only ever looks at message deltas, usage and the ending. The per-token frame is the
precomputed envelope around one orjson call on the text, as in Chat Completions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from sluicegate.core.accumulate import ChatResult
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemKind,
    TokenLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import DONE, Frame
from sluicegate.dialects.fingerprint import SYSTEM_FINGERPRINT
from sluicegate.dialects.openai_errors import openai_error

if TYPE_CHECKING:
    from sluicegate.dialects.base import EncoderContext, Turn

_MESSAGE = ItemKind.MESSAGE  # per token: an enum member lookup costs ~100 ns in Python 3.11


def finish_reason(reason: FinishReason | None) -> str:
    """A completion ends by a stop (end of text, a stop string) or the token limit."""
    if reason is FinishReason.LENGTH or reason is FinishReason.CONTENT_FILTER:
        return reason.value
    return "stop"


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def legacy_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """OpenAI's legacy logprobs: parallel arrays, the alternatives as {token: logprob}, and each
    token's character offset in the whole text (from `offset`)."""
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t.token: t.logprob for t in e.top} for e in entries],
        "text_offset": offsets,
    }


def encoder_for(turn: Turn, context: EncoderContext, choice: int | None) -> CompletionsEncoder:
    """The response's encoder, or (`choice`) that of one of `n` > 1 choices: its index, no
    usage at its finish (the request's is summed once). Here, compiled, so that the dialect's
    call passes three arguments: the encoder's eight, five of them keywords, parsed by name
    from an interpreted call per stream (as Chat Completions' `encoder_for`)."""
    options: Any = turn.request  # the dialect's `CompletionOptions`
    return CompletionsEncoder(
        context.turn_id,
        context.created,
        turn.chat.model,
        include_usage=options.include_usage,
        logprobs=turn.chat.sampling.logprobs,
        system_fingerprint=SYSTEM_FINGERPRINT,
        index=choice or 0,
        usage_at_finish=choice is None,
    )


class CompletionsEncoder:
    """`POST /v1/completions`: `text_completion` chunks, the finish chunk, the usage chunk
    (`stream_options.include_usage`), `[DONE]`."""

    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        *,
        include_usage: bool,
        logprobs: bool,
        index: int = 0,
        usage_at_finish: bool = True,
        system_fingerprint: str | None = None,
    ) -> None:
        """`index`: the choice this encoder's chunks belong to (`n` > 1, `dialects/choices.py`);
        `usage_at_finish`: False for such a choice, whose usage the request sums once."""
        head: dict[str, Any] = {
            "id": completion_id,
            "object": "text_completion",
            "created": created,
            "model": model,
        }
        if system_fingerprint is not None:
            head["system_fingerprint"] = system_fingerprint
        envelope = orjson.dumps(head)
        self.system_fingerprint = system_fingerprint
        # A slice: the orjson result's buffer is not kept. The envelope (`_open`, used at the
        # finish) is sliced from the per-token head, not kept beside it for a stream's life.
        open_ = envelope[:-1]
        self._open_end = len(open_)
        self._head = open_ + b',"choices":[{"index":' + b"%d" % index + b',"text":'
        self._usage_null = b',"usage":null' if include_usage else b""
        self._tail = b',"logprobs":null,"finish_reason":null}]' + self._usage_null + b"}"
        self.completion_id, self.created, self.model = completion_id, created, model
        self.include_usage = include_usage
        self.usage_at_finish = usage_at_finish
        self.index = index
        self.logprobs = logprobs
        self.usage = Usage()
        self._offset = 0  # characters streamed so far (legacy logprobs' text_offset)

    @property
    def _open(self) -> bytes:
        """The envelope's fields, without the closing brace."""
        return self._head[: self._open_end]

    def opening(self) -> list[Frame]:
        return []

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token
            if event.item.kind is not _MESSAGE:
                return []
            if not self.logprobs:
                return [Frame(self._head + orjson.dumps(event.text) + self._tail)]
            logprobs = legacy_logprobs(event.logprobs or [], self._offset)
            self._offset += len(event.text)
            return [self._choice(event.text, logprobs, None)]
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # per case tried, `isinstance` of one of our classes a type compare (docs/compiled.md).
        if isinstance(event, UsageReport):
            self.usage = event.usage
        elif isinstance(event, Finished):
            frames = [self._choice("", None, finish_reason(event.reason))]
            if self.include_usage and self.usage_at_finish:
                frames.append(self.usage_chunk(self.usage))
            return frames
        elif isinstance(event, Failed):
            return [Frame(orjson.dumps(openai_error(event.error)), "error")]
        return []

    def _choice(self, text: str, logprobs: dict[str, Any] | None, finish: str | None) -> Frame:
        choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return Frame(self._open + b',"choices":[' + orjson.dumps(choice) + b"]" + self._usage_null + b"}")

    def usage_chunk(self, usage: Usage) -> Frame:
        """The chunk with no choices that carries the usage (once per request, `n` or not)."""
        return Frame(self._open + b',"choices":[],"usage":' + orjson.dumps(usage_body(usage)) + b"}")

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return [DONE]

    def body(self, result: ChatResult) -> dict[str, Any]:
        logprobs = None
        if self.logprobs:
            logprobs = legacy_logprobs([lp for i in result.of_kind(_MESSAGE) for lp in i.logprobs], 0)
        choice = {
            "index": self.index,
            "text": result.text_of(_MESSAGE) or "",
            "logprobs": logprobs,
            "finish_reason": finish_reason(result.finish_reason),
        }
        return {
            "id": self.completion_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_body(result.usage),
            "system_fingerprint": self.system_fingerprint,
        }

    def response_object(self) -> dict[str, Any] | None:
        return None
