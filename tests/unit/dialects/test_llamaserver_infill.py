"""llama-server's `/infill` without a server: its body is `/completion`'s options around a
fill-in-the-middle prompt, answered with `/completion`'s objects and errors (llama-server hands
both to one completion handler), refused in llama-server's words."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorKind, SluicegateError
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
from sluicegate.core.request import FileChunk
from sluicegate.core.segment import segment
from sluicegate.dialects.base import Dialect, EncoderContext
from sluicegate.dialects.llamaserver.dialect import InfillDialect, LlamaServerDialect
from sluicegate.dialects.registry import dialect_for

FIM = {
    "input_prefix": "def f(",
    "input_suffix": "):\n",
    "input_extra": [{"filename": "u.py", "text": "X = 1\n"}],
}
OPTIONS = {"n_predict": 3, "n_probs": 1, "temperature": 0, "stop": ["\n\n"], "return_tokens": True}


def _lp(token: str, token_id: int) -> TokenLogprob:
    return TokenLogprob(token, -0.5, None, [TopLogprob(token, -0.5, None, token_id)], token_id)


RAW: list[RawEvent] = [
    UsageReport(Usage(9, 0)),
    TextDelta(ItemKind.MESSAGE, "a", [_lp("a", 64)]),
    TextDelta(ItemKind.MESSAGE, ", b", [_lp(", b", 11)]),
    UsageReport(Usage(9, 2)),
]


async def _objects(dialect: Dialect, body: dict[str, Any], raw: list[RawEvent]) -> list[Any]:
    """Every object the dialect writes for `raw`: the streamed ones, then the body."""

    async def events() -> AsyncIterator[RawEvent]:
        for event in raw:
            yield event

    turn = dialect.parse(body, {}, {})
    accumulator = Accumulator()
    context = EncoderContext("t", 0, "i", accumulator, lambda _: None, stored=False)
    encoder = dialect.encoder(turn, context)
    objects: list[Any] = []
    canonical: list[Event] = [e async for e in segment(events())]
    for event in canonical:
        accumulator.feed(event)
        objects += [orjson.loads(f.data) for f in encoder.encode(event)]
    objects.append(encoder.body(accumulator.result))
    for o in objects:  # the times are the clock's; which are given is the shape
        if "timings" in o:
            o["timings"] = sorted(o["timings"])
    return objects


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("ending", [Finished(FinishReason.LENGTH), Finished(FinishReason.STOP, "\n\n")])
async def test_infill_answers_with_completions_objects(stream: bool, ending: RawEvent) -> None:
    """Token ids in the objects and probabilities, the whole `timings` and
    `generation_settings`, `stop_type` and the refusals: the same as `/completion`'s."""
    infill = await _objects(InfillDialect(lambda: "m"), {**FIM, **OPTIONS, "stream": stream}, [*RAW, ending])
    body = {"prompt": "", **OPTIONS, "stream": stream}
    completion = await _objects(LlamaServerDialect(lambda: "m"), body, [*RAW, ending])
    assert infill == completion
    if stream:
        assert infill[0]["tokens"] == [64] and infill[0]["completion_probabilities"][0]["id"] == 64
    assert "predicted_per_token_ms" in infill[-1]["timings"]


def test_an_answer_that_never_finished_has_stop_type_none() -> None:
    dialect = InfillDialect(lambda: "m")
    context = EncoderContext("t", 0, "i", Accumulator(), lambda _: None, stored=False)
    encoder = dialect.encoder(dialect.parse(FIM, {}, {}), context)
    assert encoder.body(context.accumulator.result)["stop_type"] == "none"


def test_infill_takes_completions_options_around_the_fim_prompt() -> None:
    body = {**FIM, "prompt": " x", "model": "m", **OPTIONS, "id_slot": 1, "response_fields": ["content"]}
    turn = InfillDialect().parse(body, {}, {})
    completion = LlamaServerDialect().parse({"prompt": "p", "model": "m", **OPTIONS, "id_slot": 1}, {}, {})
    prompt = turn.chat.prompt
    assert prompt is not None and prompt.fill_in_middle
    assert (prompt.text, prompt.suffix, prompt.middle) == ("def f(", "):\n", " x")
    assert prompt.extra == [FileChunk("u.py", "X = 1\n")]
    assert turn.chat.sampling == completion.chat.sampling and turn.chat.extra == completion.chat.extra
    assert turn.request.settings == completion.request.settings and turn.request.response_fields == [
        "content"
    ]


def test_infill_without_a_model_goes_to_the_fim_model_or_is_refused() -> None:
    assert InfillDialect(lambda: "fim").parse(FIM, {}, {}).chat.model == "fim"
    with pytest.raises(SluicegateError) as caught:
        InfillDialect().parse(FIM, {}, {})
    assert caught.value.info.param == "model"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input_suffix": "y"}, '"input_prefix" is required'),
        ({"input_prefix": "x"}, '"input_suffix" is required'),
        ({**FIM, "prompt": 5}, '"prompt" must be a string'),
        ({**FIM, "input_extra": {}}, '"input_extra" must be an array'),
        ({**FIM, "input_extra": [{}]}, 'must contain a "text" field'),
        ({**FIM, "input_extra": [{"filename": "ok"}]}, 'must contain a "text" field'),
        ({**FIM, "input_extra": [{"filename": 123, "text": "abc"}]}, '"filename" field must be a string'),
        ({**FIM, "input_extra": [{"filename": 123, "text": 456}]}, 'must contain a "text" field'),
        ({**FIM, "n_predict": 0}, "n_predict = 0"),  # `/completion`'s words
    ],
)
def test_refused_in_llama_servers_words(body: dict[str, Any], message: str) -> None:
    """tools/server/server-context.cpp `post_infill` and tests/unit/test_infill.py's cases."""
    with pytest.raises(SluicegateError) as caught:
        InfillDialect(lambda: "fim").parse(body, {}, {})
    assert message in caught.value.info.message


def test_a_model_without_fim_tokens_is_not_supported() -> None:
    """llama-server: 501 `not_supported_error`, "Infill is not supported by this model"."""
    dialect = InfillDialect()
    turn = dialect.parse({**FIM, "model": "plain"}, {}, {})
    info = SimpleNamespace(capabilities=SimpleNamespace(fill_in_middle=False))
    with pytest.raises(SluicegateError) as caught:
        dialect.check(turn, info)
    assert caught.value.info.kind is ErrorKind.NOT_IMPLEMENTED
    error = dialect.error(caught.value.info)["error"]
    assert error["code"] == 501 and error["type"] == "not_supported_error"
    assert error["message"].startswith("Infill is not supported by this model")
    dialect.check(turn, SimpleNamespace(capabilities=SimpleNamespace(fill_in_middle=True)))


def test_infill_is_declared_by_the_llamaserver_dialect() -> None:
    spec = dialect_for("/infill")
    assert spec is not None and spec.name == "infill"
    assert (
        InfillDialect.spec is spec and InfillDialect.__module__ == "sluicegate.dialects.llamaserver.dialect"
    )
