"""Text completions relayed to an OpenAI-compatible upstream's `/completions`.

The request body (a `ChatRequest` whose `prompt` is set → OpenAI's legacy completions body,
streamed, usage asked for) and the stream decoder (`text_completion` chunks → raw events).
Chunks carry `choices[0].text`, legacy logprobs (`tokens`, `token_logprobs`, `top_logprobs`
as {token: logprob}) or, from some servers, the chat shape (`content: [...]`); everything else
— usage, errors, `[DONE]`, a stream that ends early — is Chat Completions' (wire.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, TokenLogprob, TopLogprob
from sluicegate.core.request import ChatRequest
from sluicegate.engines.upstream.request_body import add_extra, add_sampling
from sluicegate.engines.upstream.wire import ChunkDecoder, _logprobs, _PlainChunks

COMPLETIONS_PATH = "/completions"
_MESSAGE = ItemKind.MESSAGE


def completion_body(request: ChatRequest, upstream_model: str) -> dict[str, Any]:
    prompt = request.prompt
    assert prompt is not None
    body: dict[str, Any] = {
        "model": upstream_model,
        "prompt": prompt.text,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if prompt.suffix is not None:
        body["suffix"] = prompt.suffix
    if prompt.echo:
        body["echo"] = True
    add_sampling(body, request.sampling)
    if request.sampling.logprobs:  # legacy completions: the number of alternatives, 0 for the token alone
        body["logprobs"] = request.sampling.top_logprobs or 0
    add_extra(body, request)
    return body


class _PlainTextChunks(_PlainChunks):
    """Per-token `text_completion` chunks, as vLLM and OpenAI-compatible servers write them."""

    __slots__ = ()
    content_at = b'"choices":[{"index":0,"text":"'
    role_at = b""  # a text completion has no role chunk
    tails = (
        b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}',
        b',"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}',
        b',"logprobs":null,"finish_reason":null}]}',
        b',"logprobs":null,"finish_reason":null}],"usage":null}',
    )


def legacy_logprobs(logprobs: Any) -> list[TokenLogprob] | None:
    """Legacy completions logprobs (parallel arrays) or the chat shape, as token logprobs."""
    if not isinstance(logprobs, dict):
        return None
    if "content" in logprobs:
        return _logprobs(logprobs.get("content"))
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    out: list[TokenLogprob] = []
    for i, token in enumerate(tokens):
        value = values[i] if i < len(values) and isinstance(values[i], int | float) else 0.0
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        out.append(
            TokenLogprob(
                str(token), float(value), None, [TopLogprob(str(t), float(v), None) for t, v in top.items()]
            )
        )
    return out or None


class CompletionChunkDecoder(ChunkDecoder):
    """One upstream `/completions` stream's state."""

    __slots__ = ()
    plain_chunks: ClassVar[type[_PlainChunks]] = _PlainTextChunks

    def _choice(self, choice: dict[str, Any], out: list[RawEvent]) -> None:
        text = choice.get("text")
        logprobs = legacy_logprobs(choice.get("logprobs"))
        if isinstance(text, str) and (text or logprobs):
            out.append(TextDelta(_MESSAGE, text, logprobs))
