"""llama-server's dialect without a server: `/completion` requests, the objects its encoder
writes for canonical events, and the `/tokenize` shapes."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
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
from sluicegate.core.segment import segment
from sluicegate.core.slots import N_KEEP
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.dialects.llamaserver.dialect import LlamaServerDialect
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
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
        "logit_bias": [],
        "model": "tiny",
    }
    body = encoder.body(accumulator.result)
    assert body["content"] == " a\n" and body["tokens_predicted"] == 2 and body["prompt"] == "hi"
    assert encoder.closing() == []  # no [DONE]: llama-server's stream just ends


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("x", "x"),
        ([1, 2], [1, 2]),
        (["x"], "x"),
        ([[3, 4]], [3, 4]),
        ("", ""),
        ([1, "a", 2], [1, "a", 2]),  # ids and texts mixed: one prompt (llama-server's tokenize_mixed)
        ({"prompt_string": "x"}, "x"),
        ([{"prompt_string": [5, "y"]}], [5, "y"]),
    ],
)
def test_prompts(prompt: Any, expected: Any) -> None:
    chat, options = parse_completion({"prompt": prompt}, None)
    assert chat.prompt is not None and chat.prompt.text == expected and chat.model == ""
    assert chat.sampling.n == 1 and options.prompts == [expected]


def test_several_prompts_are_one_generation_each() -> None:
    chat, options = parse_completion({"prompt": [[1, 2], "x", {"prompt_string": "y"}], "seed": 7}, None)
    assert options.prompts == [[1, 2], "x", "y"] and chat.sampling.n == 3
    dialect = LlamaServerDialect()
    turn = dialect.parse({"prompt": ["a", [1]]}, {}, {})
    choices = dialect.choices(turn)
    assert choices is not None
    first, second = choices.prompt(0), choices.prompt(1)
    assert first is not None and second is not None and (first.text, second.text) == ("a", [1])
    # One prompt: no choices, the ordinary path.
    assert dialect.choices(dialect.parse({"prompt": "a"}, {}, {})) is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"prompt": 3},
        {"prompt": []},
        {"prompt": [-1]},
        {"prompt": [{"text": "x"}]},
        {"prompt": {"prompt_string": "x", "multimodal_data": "aGk="}},
        {"prompt": {"prompt_string": [1, 2], "multimodal_data": ["aGk="]}},
        {"prompt": [{"prompt_string": "<__media__>", "multimodal_data": ["aGk="]}, "y"]},
        {"prompt": "x", "n_predict": 0},
    ],
)
def test_refused(body: dict[str, Any]) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_completion(body, "m")
    assert caught.value.info.param in ("prompt", "n_predict")


def test_multimodal_data_becomes_the_prompts_image_parts() -> None:
    chat, _ = parse_completion(
        {"prompt": {"prompt_string": "a <__media__> b <__media__>", "multimodal_data": ["aGk=", " Ynll\n"]}},
        "m",
    )
    assert chat.prompt is not None and chat.prompt.text == "a <__media__> b <__media__>"
    assert [(p.type, p.image_url) for p in chat.prompt.media] == [
        ("image", "data:;base64,aGk="),
        ("image", "data:;base64,Ynll"),
    ]
    # No images: a prompt object is its text, as before.
    plain, _ = parse_completion({"prompt": {"prompt_string": "x"}}, "m")
    assert plain.prompt is not None and plain.prompt.media == []


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


def _lp(token: str, token_id: int, logprob: float = -0.5) -> TokenLogprob:
    top = [TopLogprob(token, logprob, list(token.encode()), token_id), TopLogprob("z", -2.0, [122], 9)]
    return TokenLogprob(token, logprob, list(token.encode()), top, token_id)


ID_RAW: list[RawEvent] = [
    UsageReport(Usage(5, 0)),
    TextDelta(ItemKind.MESSAGE, " a", [_lp(" a", 11)]),
    TextDelta(ItemKind.MESSAGE, "b", [_lp("b", 12)]),
    UsageReport(Usage(5, 2, accepted_prediction_tokens=1, rejected_prediction_tokens=3)),
    Finished(FinishReason.LENGTH),
]


async def _run(body: dict[str, Any], raw: list[RawEvent]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    chat, options = parse_completion(body, "tiny")
    accumulator = Accumulator()
    encoder = CompletionEncoder(chat.model, accumulator, options, "hi")
    objects: list[dict[str, Any]] = []
    for event in await _canonical(raw):
        accumulator.feed(event)
        objects += [orjson.loads(f.data) for f in encoder.encode(event)]
    return objects, encoder.body(accumulator.result)


async def test_token_ids_streamed_and_returned() -> None:
    chat, _ = parse_completion({"prompt": "x", "stream": True}, None)
    assert chat.sampling.token_ids  # a stream's chunks always carry their tokens
    assert not parse_completion({"prompt": "x"}, None)[0].sampling.token_ids
    objects, _ = await _run({"prompt": "x", "stream": True}, ID_RAW)
    assert [o["tokens"] for o in objects[:2]] == [[11], [12]] and objects[-1]["tokens"] == []
    _, body = await _run({"prompt": "x", "return_tokens": True}, ID_RAW)
    assert body["tokens"] == [11, 12]
    _, body = await _run({"prompt": "x"}, ID_RAW)
    assert body["tokens"] == []


async def test_probabilities_name_token_ids() -> None:
    objects, body = await _run({"prompt": "x", "n_probs": 2, "stream": True}, ID_RAW)
    first = objects[0]["completion_probabilities"]
    assert first[0]["id"] == 11 and [t["id"] for t in first[0]["top_logprobs"]] == [11, 9]
    _, body = await _run({"prompt": "x", "n_probs": 2, "post_sampling_probs": True}, ID_RAW)
    entry = body["completion_probabilities"][1]
    assert entry["id"] == 12 and entry["prob"] == pytest.approx(math.exp(-0.5))
    assert "logprob" not in entry and [t["id"] for t in entry["top_probs"]] == [12, 9]
    assert all(0 < t["prob"] <= 1 for t in entry["top_probs"])


async def test_timings_truncation_and_response_fields() -> None:
    _, body = await _run({"prompt": "x", "n_predict": 2}, ID_RAW)
    assert body["timings"]["draft_n"] == 4 and body["timings"]["draft_n_accepted"] == 1
    assert body["truncated"] is False  # the limit asked for
    _, body = await _run({"prompt": "x", "n_predict": 9}, ID_RAW)
    assert body["truncated"] is True and body["stop_type"] == "limit"  # the context ran out first
    _, body = await _run({"prompt": "x"}, RAW)
    assert "draft_n" not in body["timings"]
    fields = ["content", "generation_settings/n_predict", "missing/key"]
    _, body = await _run({"prompt": "x", "n_predict": 2, "response_fields": fields}, ID_RAW)
    assert body == {"content": " ab", "generation_settings/n_predict": 2}


@pytest.mark.parametrize(
    ("finish", "stop_type", "word"),
    [
        (Finished(FinishReason.STOP, stop_word="\n\n"), "word", "\n\n"),
        (Finished(FinishReason.STOP), "eos", ""),
        (Finished(FinishReason.LENGTH), "limit", ""),
    ],
)
async def test_stop_type_tells_a_stop_string_from_the_end_of_text(
    finish: Finished, stop_type: str, word: str
) -> None:
    raw: list[RawEvent] = [*RAW[:-1], finish]
    objects, body = await _run({"prompt": "x", "stream": True}, raw)
    assert objects[-1]["stop_type"] == stop_type and objects[-1]["stopping_word"] == word
    _, body = await _run({"prompt": "x"}, raw)
    assert body["stop_type"] == stop_type and body["stopping_word"] == word


def test_n_keep_goes_to_the_engine() -> None:
    assert parse_completion({"prompt": "x", "n_keep": -1}, None)[0].extra[N_KEEP] == -1
    assert parse_completion({"prompt": "x", "n_keep": 12}, None)[0].extra[N_KEEP] == 12
    assert N_KEEP not in parse_completion({"prompt": "x", "n_keep": 0}, None)[0].extra
    with pytest.raises(SluicegateError, match="n_keep"):
        parse_completion({"prompt": "x", "n_keep": -2}, None)


async def test_a_context_shift_is_truncated() -> None:
    raw: list[RawEvent] = [
        *RAW[:-2],
        UsageReport(Usage(5, 2, shifted_tokens=100)),
        Finished(FinishReason.LENGTH),
    ]
    _, body = await _run({"prompt": "x", "n_predict": 2}, raw)
    assert body["truncated"] is True and body["tokens_predicted"] == 2 and body["stop_type"] == "limit"


@pytest.mark.parametrize(
    ("bias", "ids", "texts"),
    [
        ({"15": -100, "hello": 5}, {15: -100.0}, {"hello": 5.0}),
        ([[15, False], [" the ", -1]], {15: -math.inf}, {" the ": -1.0}),
        ({"7": False}, {7: -math.inf}, {}),
    ],
)
def test_logit_bias_shapes(bias: Any, ids: dict[int, float], texts: dict[str, float]) -> None:
    chat, _ = parse_completion({"prompt": "x", "logit_bias": bias}, None)
    assert chat.sampling.logit_bias == ids and chat.sampling.logit_bias_text == texts


def test_errors_in_llama_servers_shape() -> None:
    """A prompt past the context is llama-server's `exceed_context_size_error`, with its two
    numbers; other errors keep their type and carry no extra fields."""
    too_long = ErrorInfo(
        ErrorKind.INVALID_REQUEST,
        "too long",
        "prompt",
        "context_length_exceeded",
        {"n_prompt_tokens": 300, "n_ctx": 256},
    )
    assert llama_server_error(too_long) == {
        "error": {
            "code": 400,
            "message": "too long",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 300,
            "n_ctx": 256,
        }
    }
    other = llama_server_error(ErrorInfo(ErrorKind.INVALID_REQUEST, "bad", "prompt"))
    assert other == {"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}}
