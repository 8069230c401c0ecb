"""`POST /completion` encoding: llama-server's objects — streamed, one per delta with
`stop: false` and its token ids, then the final one with `stop: true`, the counts,
`stop_type`, `timings` and `generation_settings`, no `[DONE]`; not streamed, that final object
with the whole `content` (and the output's token ids with `return_tokens`).

The token ids come from the engine (`TokenLogprob.id`, asked for by `SamplingParams.token_ids`);
an engine without them (an upstream) leaves `tokens` empty. A stop string and the end of text
are told apart by `Finished.stop_word`: `stop_type` "word" (with `stopping_word`) or "eos". With
`post_sampling_probs`, the probabilities are the model's own (before the samplers), in
llama-server's `prob`/`top_probs` shape (docs/llama-server.md).
"""

from __future__ import annotations

import math
import time
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
    PromptProgress,
    PromptStarted,
    TokenLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import Frame
from sluicegate.core.request import SamplingParams
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.request import CompletionOptions

_MESSAGE = ItemKind.MESSAGE  # per token: an enum member lookup costs ~100 ns in Python 3.11
ID_SLOT = 0  # the slot named when the request pinned none (the canonical stream does not say which)


def probabilities(entries: list[TokenLogprob], *, post_sampling: bool = False) -> list[dict[str, Any]]:
    """llama-server's `completion_probabilities`: `logprob`/`top_logprobs`, or with
    `post_sampling` `prob`/`top_probs`; `id` where the engine gave one."""
    if post_sampling:
        return [
            {
                **_id(e.id),
                "token": e.token,
                "bytes": e.bytes,
                "prob": math.exp(e.logprob),
                "top_probs": [
                    {**_id(t.id), "token": t.token, "bytes": t.bytes, "prob": math.exp(t.logprob)}
                    for t in e.top
                    if t.logprob > -math.inf  # llama-server never lists a 0.0 probability
                ],
            }
            for e in entries
        ]
    return [
        {
            **_id(e.id),
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes,
            "top_logprobs": [
                {**_id(t.id), "token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in e.top
            ],
        }
        for e in entries
    ]


def _id(token: int | None) -> dict[str, int]:
    return {} if token is None else {"id": token}


def token_ids(entries: list[TokenLogprob] | None) -> list[int]:
    return [e.id for e in entries or () if e.id is not None]


def bias_entries(bias: dict[int, float]) -> list[dict[str, Any]]:
    """llama-server's `generation_settings.logit_bias`: `{"bias", "token"}` each, a ban (-inf)
    as null, as its JSON writes an infinity."""
    return [{"bias": None if math.isinf(v) else v, "token": t} for t, v in bias.items()]


def stop_type(result: ChatResult) -> str:
    """llama-server's README: "word" (a stop string), "limit" (`n_predict` or the context),
    "eos" (the model's end of generation), "none" (not stopped: no finish came)."""
    if result.stop_word is not None:
        return "word"
    if result.finish_reason is None:
        return "none"
    return "limit" if result.finish_reason is FinishReason.LENGTH else "eos"


def picked(body: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """llama-server's `response_fields`: each named field (`a/b`: `b` inside `a`) that the body
    has, under the name as given."""
    out: dict[str, Any] = {}
    for name in fields:
        value: Any = body
        for key in name.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[name] = value
    return out


class CompletionEncoder:
    """Canonical events → llama-server `/completion` objects, for one response."""

    def __init__(
        self,
        model: str,
        accumulator: Accumulator,
        options: CompletionOptions,
        prompt: str,
        index: int = 0,
        sampling: SamplingParams | None = None,
    ) -> None:
        """`index`: which of the request's prompts this answers (several: llama-server's array);
        `sampling`: the request's, whose `logit_bias` the engine resolved (text keys to token
        ids, `ignore_eos` to its end tokens) by the time the answer ends."""
        self.model = model
        self.sampling = sampling
        self.accumulator = accumulator
        self.options = options
        self.prompt = prompt
        self.index = index
        self.logprobs = options.settings.get("n_probs", 0) > 0
        self.usage = Usage()
        self.predicted = 0
        self._slot = options.id_slot if options.id_slot >= 0 else ID_SLOT
        self._head = b'{"index":%d,"content":' % index
        self._tail_at = b',"stop":false,"id_slot":%d,"tokens_predicted":' % self._slot
        self._prompt_at = 0.0  # perf_counter() when the prompt started (`return_progress`)

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
                entries = probabilities(event.logprobs or [], post_sampling=self.options.post_sampling_probs)
                extra = b',"completion_probabilities":' + orjson.dumps(entries)
            tokens = b',"tokens":' + orjson.dumps(token_ids(event.logprobs))
            return [
                Frame(self._head + orjson.dumps(event.text) + tokens + self._tail_at + counts + extra + b"}")
            ]
        match event:
            case PromptStarted() if self.options.return_progress:
                # llama-server's first update, before any prompt token is decoded
                self._prompt_at = time.perf_counter()
                return [self._progress(event.cached, event.total, event.cached)]
            case PromptProgress() if self.options.return_progress and event.total:
                return [self._progress(event.processed, event.total, event.cached)]
            case UsageReport():
                self.usage = event.usage
            case Finished():
                return [Frame(orjson.dumps(self.final(self.accumulator.result, stream=True)))]
            case Failed():
                return [Frame(orjson.dumps(llama_server_error(event.error)))]
        return []

    def _progress(self, processed: int, total: int, cached: int) -> Frame:
        """llama-server's `prompt_progress` object, with the prompt's timings so far."""
        elapsed = (time.perf_counter() - self._prompt_at) * 1000 if processed > cached else 0.0
        decoded = processed - cached
        body = {
            "index": self.index,
            "content": "",
            "tokens": [],
            "stop": False,
            "id_slot": self._slot,
            "tokens_predicted": 0,
            "tokens_evaluated": total,
            "timings": {
                "cache_n": cached,
                "prompt_n": decoded,
                "prompt_ms": elapsed,
                "prompt_per_token_ms": elapsed / decoded if decoded else 0.0,
                "prompt_per_second": decoded / elapsed * 1000 if elapsed else 0.0,
                "predicted_n": 0,
                "predicted_ms": 0.0,
                "predicted_per_token_ms": 0.0,
                "predicted_per_second": 0.0,
            },
            "prompt_progress": {"total": total, "cache": cached, "processed": processed, "time_ms": elapsed},
        }
        return Frame(orjson.dumps(body))

    def _defaulted(self) -> dict[str, Any]:
        """What the model's `sampling` defaults filled in after the request was read (the
        request's own `sampling`, completed in place when the model admitted it): its `seed`,
        as llama-server reports its `--seed`."""
        if self.sampling is None or self.sampling.seed is None:
            return {}
        return {"seed": self.sampling.seed}

    def final(self, result: ChatResult, *, stream: bool) -> dict[str, Any]:
        usage = result.usage
        text = result.text_of(_MESSAGE) or ""
        predicted_ms = result.generation_seconds * 1000
        prompt_ms = (result.time_to_first_token or 0.0) * 1000
        prompt_n = usage.prompt_tokens - usage.cached_tokens
        entries = [lp for item in result.of_kind(_MESSAGE) for lp in item.logprobs]
        n_predict = self.options.n_predict
        # Stopped by the limit but short of `n_predict` (the context was full), or a context
        # shift dropped part of the context to go on.
        truncated = bool(usage.shifted_tokens) or (
            result.finish_reason is FinishReason.LENGTH
            and (n_predict < 0 or usage.completion_tokens < n_predict)
        )
        body: dict[str, Any] = {
            "index": self.index,
            "content": "" if stream else text,
            "tokens": token_ids(entries) if self.options.return_tokens and not stream else [],
            "id_slot": self._slot,
            "stop": True,
            "model": self.model,
            "tokens_predicted": usage.completion_tokens,
            "tokens_evaluated": usage.prompt_tokens,
            "generation_settings": {
                **self.options.settings,
                **self._defaulted(),
                "logit_bias": bias_entries(self.sampling.logit_bias if self.sampling else {}),
                "model": self.model,
            },
            "prompt": self.prompt,
            "has_new_line": "\n" in text,
            "truncated": truncated,
            "stop_type": stop_type(result),
            "stopping_word": result.stop_word or "",
            "tokens_cached": usage.cached_tokens,
            "timings": {
                "cache_n": usage.cached_tokens,
                "prompt_n": prompt_n,
                "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                "prompt_per_second": prompt_n / prompt_ms * 1000 if prompt_ms else 0.0,
                "predicted_n": usage.completion_tokens,
                "predicted_ms": predicted_ms,
                # Over the decode steps, as llama-server: the first token came with the prompt.
                "predicted_per_token_ms": predicted_ms / (usage.completion_tokens - 1)
                if usage.completion_tokens > 1
                else 0.0,
                "predicted_per_second": result.tokens_per_second,
            },
        }
        drafted = usage.accepted_prediction_tokens + usage.rejected_prediction_tokens
        if drafted:  # as llama-server: only when speculative decoding drafted
            body["timings"]["draft_n"] = drafted
            body["timings"]["draft_n_accepted"] = usage.accepted_prediction_tokens
        if self.logprobs and not stream:
            body["completion_probabilities"] = probabilities(
                entries, post_sampling=self.options.post_sampling_probs
            )
        if self.options.response_fields is not None and not stream:
            return picked(body, self.options.response_fields)
        return body

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return []

    def body(self, result: ChatResult) -> dict[str, Any]:
        return self.final(result, stream=False)

    def response_object(self) -> dict[str, Any] | None:
        return None
