"""Text completion encoders: canonical events → OpenAI `text_completion` chunks and
llama-server `/infill` objects; the non-streaming bodies; and the request parsers' refusals."""

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
from sluicegate.dialects.completions.encoder import CompletionsEncoder, InfillEncoder
from sluicegate.dialects.completions.request import parse_completion_request, parse_infill_request


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


async def test_infill_objects() -> None:
    accumulator = Accumulator()
    encoder = InfillEncoder("m", accumulator, n_predict=2, logprobs=False)
    objects = []
    for event in await _canonical(RAW):
        accumulator.feed(event)
        objects += [orjson.loads(f.data) for f in encoder.encode(event)]
    assert encoder.closing() == []  # no [DONE] on /infill
    assert [(o["content"], o["stop"], o["tokens_predicted"]) for o in objects[:-1]] == [
        (" a", False, 1),
        ("\n", False, 2),
    ]
    final = objects[-1]
    assert final["stop"] is True and final["stop_type"] == "limit" and final["tokens_evaluated"] == 5
    assert encoder.body(accumulator.result)["content"] == " a\n"


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


def test_infill_model_defaults_and_is_required_without_one() -> None:
    request, options = parse_infill_request({"input_prefix": "a", "input_suffix": "b"}, "fim")
    assert request.model == "fim" and request.sampling.max_tokens is None and options.n_predict == -1
    with pytest.raises(SluicegateError) as caught:
        parse_infill_request({"input_prefix": "a", "input_suffix": "b"}, None)
    assert caught.value.info.param == "model"
