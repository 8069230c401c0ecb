"""llama-server's dialect without a server: `/completion` requests, the objects its encoder
writes for canonical events, and the `/tokenize` shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import (
    Event,
    Finished,
    FinishReason,
    ItemKind,
    RawEvent,
    TextDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.segment import segment
from sluicegate.dialects.llamaserver.encoder import CompletionEncoder
from sluicegate.dialects.llamaserver.request import parse_completion
from sluicegate.dialects.llamaserver.tokens import parse_detokenize, parse_tokenize, tokenize_body


async def _canonical(events: list[RawEvent]) -> list[Event]:
    async def raw() -> AsyncIterator[RawEvent]:
        for event in events:
            yield event

    return [e async for e in segment(raw())]


RAW: list[RawEvent] = [
    UsageReport(Usage(5, 0)),
    TextDelta(ItemKind.MESSAGE, " a"),
    TextDelta(ItemKind.MESSAGE, "\n"),
    UsageReport(Usage(5, 2)),
    Finished(FinishReason.LENGTH),
]


async def test_stream_then_body() -> None:
    chat, options = parse_completion({"prompt": "hi", "n_predict": 2, "stream": True}, "tiny")
    accumulator = Accumulator()
    encoder = CompletionEncoder(chat.model, accumulator, options, "hi")
    objects: list[dict[str, Any]] = []
    for event in await _canonical(RAW):
        accumulator.feed(event)
        objects += [orjson.loads(f.data) for f in encoder.encode(event)]
    assert [o["content"] for o in objects] == [" a", "\n", ""]
    assert [o["stop"] for o in objects] == [False, False, True]
    assert [o["tokens_predicted"] for o in objects[:2]] == [1, 2] and objects[0]["tokens_evaluated"] == 5
    final = objects[-1]
    assert final["stop_type"] == "limit" and final["model"] == "tiny" and final["has_new_line"] is True
    assert final["generation_settings"] == {
        "n_predict": 2,
        "seed": -1,
        "stop": [],
        "n_probs": 0,
        "stream": True,
        "model": "tiny",
    }
    body = encoder.body(accumulator.result)
    assert body["content"] == " a\n" and body["tokens_predicted"] == 2 and body["prompt"] == "hi"
    assert encoder.closing() == []  # no [DONE]: llama-server's stream just ends


@pytest.mark.parametrize(
    ("prompt", "expected"), [("x", "x"), ([1, 2], [1, 2]), (["x"], "x"), ([[3, 4]], [3, 4]), ("", "")]
)
def test_prompts(prompt: Any, expected: Any) -> None:
    chat, _ = parse_completion({"prompt": prompt}, None)
    assert chat.prompt is not None and chat.prompt.text == expected and chat.model == ""


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"prompt": 3},
        {"prompt": ["a", [1]]},
        {"prompt": [1, "a"]},
        {"prompt": [-1]},
        {"prompt": "x", "n_predict": 0},
    ],
)
def test_refused(body: dict[str, Any]) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_completion(body, "m")
    assert caught.value.info.param in ("prompt", "n_predict")


def test_sampling_and_limits() -> None:
    chat, options = parse_completion(
        {
            "prompt": "x",
            "max_tokens": 9,
            "top_k": 5,
            "min_p": 0.1,
            "n_probs": 3,
            "stop": ["\n"],
            "model": "m",
        },
        None,
    )
    s = chat.sampling
    assert (s.max_tokens, s.top_k, s.min_p, s.logprobs, s.top_logprobs, s.stop) == (
        9,
        5,
        0.1,
        True,
        3,
        ["\n"],
    )
    assert chat.model == "m" and options.n_predict == 9
    assert parse_completion({"prompt": "x"}, None)[0].sampling.max_tokens is None  # -1: until it stops


def test_tokenize_shapes() -> None:
    req = parse_tokenize({"content": "á", "with_pieces": True})
    assert (req.add_special, req.parse_special, req.with_pieces) == (False, True, True)
    assert tokenize_body([1, 2], None) == {"tokens": [1, 2]}
    # A piece that is part of a UTF-8 character is its bytes, as llama-server writes it.
    assert tokenize_body([198, 164], [b"\xc3", b"\xa1"]) == {
        "tokens": [{"id": 198, "piece": [195]}, {"id": 164, "piece": [161]}]
    }
    assert tokenize_body([5], [b" world"]) == {"tokens": [{"id": 5, "piece": " world"}]}
    assert parse_detokenize({"tokens": [1, 2]}) == (None, [1, 2])
    with pytest.raises(SluicegateError):
        parse_detokenize({"tokens": [True]})
