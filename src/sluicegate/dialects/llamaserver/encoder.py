"""`POST /completion` encoding: llama-server's objects — streamed, one per token with
`stop: false`, then the final one with `stop: true`, the counts, `stop_type`, `timings` and
`generation_settings`, no `[DONE]`; not streamed, that final object with the whole `content`.

`tokens` is empty: the canonical stream carries text, not token ids (say so in
docs/llama-server.md). A stop string and the end of text are one finish reason in the canonical
stream, so both are `stop_type: "eos"`.
"""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.accumulate import Accumulator, ChatResult
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
from sluicegate.core.frames import Frame
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.request import CompletionOptions

_MESSAGE = ItemKind.MESSAGE  # per token: an enum member lookup costs ~100 ns in Python 3.11
ID_SLOT = 0  # the slot named when the request pinned none (the canonical stream does not say which)


def probabilities(entries: list[TokenLogprob]) -> list[dict[str, Any]]:
    """llama-server's `completion_probabilities` (no token ids: not every engine has them)."""
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes,
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in e.top],
        }
        for e in entries
    ]


def stop_type(reason: FinishReason | None) -> str:
    return "limit" if reason is FinishReason.LENGTH else "eos"


class CompletionEncoder:
    """Canonical events → llama-server `/completion` objects, for one response."""

    def __init__(self, model: str, accumulator: Accumulator, options: CompletionOptions, prompt: str) -> None:
        self.model = model
        self.accumulator = accumulator
        self.options = options
        self.prompt = prompt
        self.logprobs = options.settings.get("n_probs", 0) > 0
        self.usage = Usage()
        self.predicted = 0
        self._slot = options.id_slot if options.id_slot >= 0 else ID_SLOT
        self._head = b'{"index":0,"content":'
        self._tail_at = b',"tokens":[],"stop":false,"id_slot":%d,"tokens_predicted":' % self._slot

    def opening(self) -> list[Frame]:
        return []

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta:  # per token
            if event.item.kind is not _MESSAGE:
                return []
            self.predicted += 1
            counts = b"%d" % self.predicted + b',"tokens_evaluated":' + b"%d" % self.usage.prompt_tokens
            extra = b""
            if self.logprobs:
                extra = b',"completion_probabilities":' + orjson.dumps(probabilities(event.logprobs or []))
            return [Frame(self._head + orjson.dumps(event.text) + self._tail_at + counts + extra + b"}")]
        match event:
            case UsageReport():
                self.usage = event.usage
            case Finished():
                return [Frame(orjson.dumps(self.final(self.accumulator.result, stream=True)))]
            case Failed():
                return [Frame(orjson.dumps(llama_server_error(event.error)))]
        return []

    def final(self, result: ChatResult, *, stream: bool) -> dict[str, Any]:
        usage = result.usage
        text = result.text_of(_MESSAGE) or ""
        predicted_ms = result.generation_seconds * 1000
        prompt_ms = (result.time_to_first_token or 0.0) * 1000
        prompt_n = usage.prompt_tokens - usage.cached_tokens
        body: dict[str, Any] = {
            "index": 0,
            "content": "" if stream else text,
            "tokens": [],
            "id_slot": self._slot,
            "stop": True,
            "model": self.model,
            "tokens_predicted": usage.completion_tokens,
            "tokens_evaluated": usage.prompt_tokens,
            "generation_settings": {**self.options.settings, "model": self.model},
            "prompt": self.prompt,
            "has_new_line": "\n" in text,
            "truncated": False,
            "stop_type": stop_type(result.finish_reason),
            "stopping_word": "",
            "tokens_cached": usage.cached_tokens,
            "timings": {
                "cache_n": usage.cached_tokens,
                "prompt_n": prompt_n,
                "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                "prompt_per_second": prompt_n / prompt_ms * 1000 if prompt_ms else 0.0,
                "predicted_n": usage.completion_tokens,
                "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / usage.completion_tokens
                if usage.completion_tokens
                else 0.0,
                "predicted_per_second": result.tokens_per_second,
            },
        }
        if self.logprobs and not stream:
            body["completion_probabilities"] = probabilities(
                [lp for item in result.of_kind(_MESSAGE) for lp in item.logprobs]
            )
        return body

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return []

    def body(self, result: ChatResult) -> dict[str, Any]:
        return self.final(result, stream=False)

    def response_object(self) -> dict[str, Any] | None:
        return None
