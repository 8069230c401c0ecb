"""core/accumulate.py: the one accumulator folds the canonical stream into a ChatResult."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import EngineFailure, ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.pipeline import collect
from sluicegate.core.segment import segment


class FakeClock:
    """The accumulator's clock in these tests, so timing assertions are exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def _agen(events: Iterable[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


async def result_of(raw: Iterable[RawEvent] | AsyncIterator[RawEvent]) -> ChatResult:
    source = raw if hasattr(raw, "__anext__") else _agen(raw)  # type: ignore[arg-type]
    return await collect(segment(source))  # type: ignore[arg-type]


async def test_items_in_order_and_text_of() -> None:
    result = await result_of(
        [
            TextDelta(ItemKind.REASONING, "think "),
            TextDelta(ItemKind.REASONING, "hard"),
            TextDelta(ItemKind.MESSAGE, "Hello"),
            TextDelta(ItemKind.MESSAGE, " world"),
            ToolCallDelta(0, '{"a":1}', "call_1", "f"),
            TextDelta(ItemKind.MESSAGE, "!"),  # a second message item
            Finished(FinishReason.STOP),
        ]
    )
    assert [(i.index, i.kind) for i in result.items] == [
        (0, ItemKind.REASONING),
        (1, ItemKind.MESSAGE),
        (2, ItemKind.TOOL_CALL),
        (3, ItemKind.MESSAGE),
    ]
    assert all(i.done for i in result.items)
    assert result.text_of(ItemKind.REASONING) == "think hard"
    assert result.text_of(ItemKind.MESSAGE) == "Hello world!"  # all message items joined
    assert result.text_of(ItemKind.REFUSAL) is None  # none at all is None, not ""
    assert [i.name for i in result.of_kind(ItemKind.TOOL_CALL)] == ["f"]
    assert result.of_kind(ItemKind.TOOL_CALL)[0].text == '{"a":1}'
    assert result.finish_reason is FinishReason.TOOL_CALLS
    assert result.error is None


async def test_empty_text_item_is_empty_string_not_none() -> None:
    result = await result_of([TextDelta(ItemKind.MESSAGE, ""), Finished(FinishReason.STOP)])
    assert result.text_of(ItemKind.MESSAGE) == ""


async def test_usage_and_finish() -> None:
    result = await result_of(
        [
            TextDelta(ItemKind.MESSAGE, "x"),
            UsageReport(Usage(prompt_tokens=7, completion_tokens=3, cached_tokens=2, reasoning_tokens=1)),
            Finished(FinishReason.LENGTH),
        ]
    )
    assert result.usage == Usage(prompt_tokens=7, completion_tokens=3, cached_tokens=2, reasoning_tokens=1)
    assert result.usage.total_tokens == 10
    assert result.finish_reason is FinishReason.LENGTH


async def test_no_usage_reported_counts_the_deltas() -> None:
    # The engine never reported usage: the segmenter counts each delta as a token.
    result = await result_of([TextDelta(ItemKind.REASONING, "hm"), TextDelta(ItemKind.MESSAGE, "x")])
    assert result.usage == Usage(completion_tokens=2, reasoning_tokens=1)
    assert result.finish_reason is FinishReason.STOP


async def test_nothing_streamed_and_no_usage_reported_gives_zero_usage() -> None:
    result = await result_of([Finished(FinishReason.STOP)])
    assert result.usage == Usage()
    assert result.finish_reason is FinishReason.STOP


async def test_error_is_recorded_and_partial_items_kept() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "partial")
        raise EngineFailure("boom", code="x")

    result = await result_of(engine())
    assert result.error == ErrorInfo(ErrorKind.ENGINE, "boom", code="x")
    assert result.finish_reason is None
    assert result.text_of(ItemKind.MESSAGE) == "partial"
    assert result.usage == Usage(completion_tokens=1)  # what streamed before the failure


def test_time_to_first_token_and_generation_time(clock: FakeClock) -> None:
    acc = Accumulator(clock)  # clock starts at 100
    item = Item(0, ItemKind.MESSAGE, "msg_1")
    clock.now = 100.5
    acc.feed(ItemAdded(item))
    assert acc.result.time_to_first_token is None  # an added item is not a token
    clock.now = 101.0
    acc.feed(ItemDelta(item, "a"))
    clock.now = 102.0
    acc.feed(ItemDelta(item, "b"))
    acc.feed(UsageReport(Usage(prompt_tokens=1, completion_tokens=5)))
    clock.now = 103.0
    acc.feed(Finished(FinishReason.STOP))
    result = acc.result
    assert result.time_to_first_token == pytest.approx(1.0)  # the first delta, not the second
    assert result.generation_seconds == pytest.approx(2.0)  # first token to the end
    assert result.tokens_per_second == pytest.approx(2.0)  # (5 - 1) / 2
    assert result.load_seconds is None


def test_time_to_first_token_counts_from_the_end_of_loading(clock: FakeClock) -> None:
    acc = Accumulator(clock)
    acc.feed(LoadStarted("m"))
    acc.feed(LoadProgress(0.5))
    clock.now = 110.0
    acc.feed(LoadFinished(9.5))
    clock.now = 110.25
    acc.feed(ItemDelta(Item(0, ItemKind.MESSAGE, "msg_1"), "a"))
    assert acc.result.load_seconds == 9.5
    assert acc.result.time_to_first_token == pytest.approx(0.25)


def test_failure_stops_the_clock(clock: FakeClock) -> None:
    acc = Accumulator(clock)
    clock.now = 101.0
    acc.feed(ItemDelta(Item(0, ItemKind.MESSAGE, "msg_1"), "a"))
    clock.now = 104.0
    acc.feed(Failed(ErrorInfo(ErrorKind.TIMEOUT, "t")))
    assert acc.result.generation_seconds == pytest.approx(3.0)
    assert acc.result.error is not None and acc.result.error.kind is ErrorKind.TIMEOUT


def test_no_tokens_means_no_ttft_and_no_rate(clock: FakeClock) -> None:
    acc = Accumulator(clock)
    clock.now = 105.0
    acc.feed(Finished(FinishReason.STOP))
    assert acc.result.time_to_first_token is None
    assert acc.result.generation_seconds == 0.0
    assert acc.result.tokens_per_second == 0.0


def test_items_come_from_item_done_only() -> None:
    acc = Accumulator()
    item = Item(0, ItemKind.MESSAGE, "msg_1")
    events: list[Event] = [ItemAdded(item), ItemDelta(item, "a")]
    for event in events:
        acc.feed(event)
    assert acc.result.items == []
    item.text, item.done = "a", True
    acc.feed(ItemDone(item))
    assert acc.result.items == [item]


async def test_time_to_first_token_real_clock_is_set() -> None:
    result = await result_of([TextDelta(ItemKind.MESSAGE, "x"), TextDelta(ItemKind.MESSAGE, "y")])
    assert result.time_to_first_token is not None and result.time_to_first_token >= 0
    assert result.generation_seconds >= 0
