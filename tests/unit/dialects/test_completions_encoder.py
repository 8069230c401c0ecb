"""The text completion encoder: canonical events → OpenAI `text_completion` chunks; the
non-streaming body; and the request parser's refusals. (`/infill`: test_llamaserver_infill.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai.types import Completion

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import (
    Event,
    Finished,
    FinishReason,
    ItemKind,
    RawEvent,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import DONE
from sluicegate.core.segment import segment
from sluicegate.dialects.completions.encoder import CompletionsEncoder
from sluicegate.dialects.completions.request import parse_completion_request


async def _raw(events: list[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


async def _canonical(events: list[RawEvent]) -> list[Event]:
    return [e async for e in segment(_raw(events))]


RAW: list[RawEvent] = [
    UsageReport(Usage(5, 0)),
    TextDelta(ItemKind.MESSAGE, " a", [TokenLogprob(" a", -0.5, None, [TopLogprob(" a", -0.5, None)])]),
    TextDelta(ItemKind.MESSAGE, "\n", [TokenLogprob("\n", -1.0, None, [TopLogprob("\n", -1.0, None)])]),
    UsageReport(Usage(5, 2)),
    Finished(FinishReason.LENGTH),
]


async def test_stream_frames_and_body_agree_and_the_sdk_reads_them() -> None:
    encoder = CompletionsEncoder("cmpl-1", 7, "m", include_usage=True, logprobs=True)
    accumulator = Accumulator()
    frames = []
    for event in await _canonical(RAW):
        accumulator.feed(event)
        frames += encoder.encode(event)
    frames += encoder.closing()
    assert frames[-1] is DONE
    chunks = [orjson.loads(f.data) for f in frames[:-1]]
    # (the SDK builds stream chunks unvalidated: OpenAI streams `finish_reason: null`)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == " a\n"  # whitespace kept
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]] == [None, None, "length"]
    assert chunks[1]["choices"][0]["logprobs"]["text_offset"] == [2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
    assert all(c.get("usage", "absent") is None for c in chunks[:-1])  # include_usage: null until the end
    body = Completion.model_validate(encoder.body(accumulator.result))
    assert body.choices[0].text == " a\n" and body.choices[0].logprobs is not None
    assert body.choices[0].logprobs.tokens == [" a", "\n"] and body.choices[0].logprobs.text_offset == [0, 2]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": [["x"]]}, "prompt"),
        ({"model": "m", "prompt": "a", "best_of": 2}, "best_of"),
        ({"model": "m", "prompt": "a", "logprobs": True}, "logprobs"),
    ],
)
def test_completion_refusals(body: dict[str, Any], param: str) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_completion_request(body)
    assert caught.value.info.param == param


def test_completion_defaults() -> None:
    request, options = parse_completion_request({"model": "m", "prompt": [[1, 2]]})
    assert request.prompt is not None and request.prompt.text == [1, 2] and not request.messages
    assert request.sampling.max_tokens == 16 and not options.stream


@pytest.mark.parametrize("choice", [None, 2])
async def test_the_dialects_encoder_is_made_with_the_requests_options(choice: int | None) -> None:
    """`encoder_for` (compiled: the dialect passes three arguments, not eight by name) makes the
    encoder the keyword call made: the same frames for the same events."""
    from sluicegate.dialects.base import EncoderContext
    from sluicegate.dialects.completions.dialect import CompletionsDialect
    from sluicegate.dialects.fingerprint import SYSTEM_FINGERPRINT

    body = {
        "model": "m",
        "prompt": "x",
        "stream": True,
        "logprobs": 1,
        "stream_options": {"include_usage": True},
    }
    turn = CompletionsDialect().parse(body, {}, {})
    context = EncoderContext("cmpl-1", 7, "i", Accumulator(), lambda _: None, False)
    made = CompletionsDialect()._encoder(turn, context, choice)
    expected = CompletionsEncoder(
        "cmpl-1",
        7,
        "m",
        include_usage=True,
        logprobs=True,
        system_fingerprint=SYSTEM_FINGERPRINT,
        index=choice or 0,
        usage_at_finish=choice is None,
    )
    assert await _stream_of(made) == await _stream_of(expected)


async def _stream_of(encoder: CompletionsEncoder) -> list[bytes]:
    frames = list(encoder.opening())
    for event in await _canonical(RAW):
        frames += encoder.encode(event)
    frames += encoder.closing()
    return [f.data for f in frames]
