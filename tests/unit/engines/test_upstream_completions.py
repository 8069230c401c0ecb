"""Text completions relayed to an OpenAI-compatible upstream: the body and the stream decoder."""

from __future__ import annotations

import orjson

from sluicegate.core.events import Finished, FinishReason, TextDelta, UsageReport
from sluicegate.core.request import ChatRequest, RawPrompt, SamplingParams
from sluicegate.engines.upstream.completions import CompletionChunkDecoder, completion_body


def test_body_is_a_streamed_legacy_completion() -> None:
    request = ChatRequest(
        model="m",
        messages=[],
        prompt=RawPrompt("def f(", suffix=")\n", echo=True),
        sampling=SamplingParams(max_tokens=16, stop=["\n"], seed=3, logprobs=True, top_logprobs=2),
    )
    assert completion_body(request, "up") == {
        "model": "up",
        "prompt": "def f(",
        "suffix": ")\n",
        "echo": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 16,
        "seed": 3,
        "stop": ["\n"],
        "logprobs": 2,
    }


def _chunk(text: str, **choice: object) -> bytes:
    body = {"id": "c", "object": "text_completion", "created": 1, "model": "up"}
    body["choices"] = [{"index": 0, "text": text, "logprobs": None, "finish_reason": None, **choice}]
    return orjson.dumps(body)


def test_decoder_reads_text_finish_usage_and_legacy_logprobs() -> None:
    decoder = CompletionChunkDecoder(None)
    events = decoder.frame(None, _chunk(" hello"))  # the per-token fast path
    events += decoder.frame(None, _chunk(" there"))
    logprobs = {"tokens": ["!"], "token_logprobs": [-0.5], "top_logprobs": [{"!": -0.5, "?": -1.0}]}
    events += decoder.frame(None, _chunk("!", logprobs=logprobs))
    events += decoder.frame(None, _chunk("", finish_reason="length"))
    usage = {
        "id": "c",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }
    events += decoder.frame(None, orjson.dumps(usage))
    events += decoder.frame(None, b"[DONE]")
    texts = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(t.text for t in texts) == " hello there!"
    assert texts[2].logprobs is not None and texts[2].logprobs[0].logprob == -0.5
    assert [t.token for t in texts[2].logprobs[0].top] == ["!", "?"]
    assert any(isinstance(e, Finished) and e.reason is FinishReason.LENGTH for e in events)
    reports = [e for e in events if isinstance(e, UsageReport)]
    assert reports[-1].usage.prompt_tokens == 3 and decoder.done
