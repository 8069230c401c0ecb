"""core/segment.py: raw engine deltas become items that open, take deltas and close."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.core.errors import EngineFailure, ErrorInfo, ErrorKind
from sluicegate.core.events import (
    ApprovalRequested,
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    ToolResult,
    ToolsListed,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ProviderInfo, ServerTool
from sluicegate.core.segment import segment

M, R, F = ItemKind.MESSAGE, ItemKind.REASONING, ItemKind.REFUSAL
SERVER_ITEMS = (ItemKind.TOOL_RESULT, ItemKind.TOOL_LIST, ItemKind.APPROVAL_REQUEST)


async def _agen(events: Iterable[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


async def run(raw: Iterable[RawEvent] | AsyncIterator[RawEvent]) -> list[Event]:
    source = raw if hasattr(raw, "__anext__") else _agen(raw)  # type: ignore[arg-type]
    return [event async for event in segment(source)]  # type: ignore[arg-type]


def shape(events: list[Event]) -> list[str]:
    """A compact picture of a canonical stream, e.g. ['+message', 'Δmessage:Hi', '-message', 'finished:stop']."""
    out = []
    for e in events:
        match e:
            case ItemAdded(item=item):
                out.append(f"+{item.kind}")
            case ItemDelta(item=item, text=text):
                out.append(f"Δ{item.kind}:{text}")
            case ItemDone(item=item):
                out.append(f"-{item.kind}")
            case Finished(reason=reason):
                out.append(f"finished:{reason}")
            case Failed(error=error):
                out.append(f"failed:{error.kind}")
            case UsageReport():
                out.append("usage")
            case _:
                out.append(type(e).__name__)
    return out


def check_invariants(events: list[Event]) -> None:
    """What every canonical stream guarantees, whatever the engine did."""
    terminals = [e for e in events if isinstance(e, Finished | Failed)]
    assert len(terminals) == 1, "exactly one terminal event"
    assert events[-1] is terminals[0], "and it is the last"
    open_items: dict[int, object] = {}
    added_order: list[int] = []
    texts: dict[int, list[str]] = {}
    tool_indexes = []
    for e in events:
        if isinstance(e, ItemAdded):
            assert e.item.index not in open_items
            assert e.item.index not in added_order, "an item is added once"
            open_items[e.item.index] = e.item
            added_order.append(e.item.index)
            texts[e.item.index] = []
            if e.item.kind is ItemKind.TOOL_CALL and e.item.provider is None:
                tool_indexes.append(e.item.tool_index)
                assert e.item.call_id
        elif isinstance(e, ItemDelta):
            assert e.item.index in open_items, "deltas only between added and done"
            texts[e.item.index].append(e.text)
        elif isinstance(e, ItemDone):
            assert open_items.pop(e.item.index) is e.item
            assert e.item.done
            if e.item.kind in SERVER_ITEMS:  # arrive whole: added and done, no deltas
                assert not texts[e.item.index]
            else:
                assert e.item.text == "".join(texts[e.item.index])
    if isinstance(terminals[0], Failed):
        # An item cut off by a failure is never reported done (a client would run a cut-off
        # call): it stays open, marked cut short. At most the one being generated.
        assert len(open_items) <= 1, "only the item being generated is left open"
        assert all(item.cut_short for item in open_items.values())  # type: ignore[attr-defined]
    else:
        assert not open_items, "every item is closed before the end"
    assert added_order == list(range(len(added_order))), "items are numbered 0.. in order"
    assert tool_indexes == list(range(len(tool_indexes))), "client tool calls are numbered 0.. in order"
    usage_at = [i for i, e in enumerate(events) if isinstance(e, UsageReport)]
    if usage_at:
        # Reports are forwarded as they come; the final count always comes just before the end.
        assert usage_at[-1] == len(events) - 2, "usage comes just before the terminal event"


def items_done(events: list[Event]) -> list:
    return [e.item for e in events if isinstance(e, ItemDone)]


def usage_of(events: list[Event]) -> Usage | None:
    """The final usage of the stream: the report just before the end, if any."""
    if len(events) >= 2 and isinstance(events[-2], UsageReport):
        return events[-2].usage
    assert not any(isinstance(e, UsageReport) for e in events), "reports, but no final one"
    return None


# --- text -----------------------------------------------------------------------------------


async def test_channel_switches_open_and_close_items() -> None:
    events = await run(
        [
            TextDelta(R, "Think"),
            TextDelta(R, "ing"),
            TextDelta(M, "Hi"),
            TextDelta(M, " there"),
            TextDelta(R, "again"),
            TextDelta(F, "No"),
            Finished(FinishReason.STOP),
        ]
    )
    assert shape(events) == [
        "+reasoning",
        "Δreasoning:Think",
        "Δreasoning:ing",
        "-reasoning",
        "+message",
        "Δmessage:Hi",
        "Δmessage: there",
        "-message",
        "+reasoning",
        "Δreasoning:again",
        "-reasoning",
        "+refusal",
        "Δrefusal:No",
        "-refusal",
        "usage",
        "finished:stop",
    ]
    check_invariants(events)
    # The engine reported no usage: a delta counts as a token, reasoning ones counted apart.
    assert usage_of(events) == Usage(prompt_tokens=0, completion_tokens=6, reasoning_tokens=3)
    done = items_done(events)
    assert [(i.index, i.kind, i.text) for i in done] == [
        (0, R, "Thinking"),
        (1, M, "Hi there"),
        (2, R, "again"),
        (3, F, "No"),
    ]
    assert [i.id[:3] for i in done] == ["rs_", "msg", "rs_", "msg"]
    assert done[1].id.startswith("msg_")
    assert len({i.id for i in done}) == 4
    assert all(i.parts == [] and i.text_so_far == i.text for i in done)


async def test_text_logprobs_are_kept_on_delta_and_item() -> None:
    from sluicegate.core.events import TokenLogprob

    lp = [TokenLogprob("Hi", -0.5, [72, 105])]
    events = await run([TextDelta(M, "Hi", lp), TextDelta(M, "!"), Finished(FinishReason.STOP)])
    first_delta = next(e for e in events if isinstance(e, ItemDelta))
    assert first_delta.logprobs == lp
    assert items_done(events)[0].logprobs == lp


async def test_a_long_reply_is_kept_in_runs_not_one_str_per_delta() -> None:
    from sluicegate.core.segmenter import COMPACT_PARTS

    deltas = [f"t{i} " for i in range(COMPACT_PARTS * 3 + 7)]
    seen: list[tuple[int, str]] = []  # what a reader of the unfinished item sees, as it grows

    async def engine() -> AsyncIterator[RawEvent]:
        for text in deltas:
            yield TextDelta(M, text)
        yield ToolCallDelta(0, "[" + ",".join("1" * (COMPACT_PARTS + 1)), "call_1", "f")
        for _ in range(COMPACT_PARTS * 2):
            yield ToolCallDelta(0, ",1")
        yield ToolCallDelta(0, "]")
        yield Finished(FinishReason.TOOL_CALLS)

    events: list[Event] = []
    async for event in segment(engine()):
        events.append(event)
        if isinstance(event, ItemDelta) and not event.item.done:
            seen.append((len(event.item.parts), event.item.text_so_far))
    check_invariants(events)
    text, call = items_done(events)
    assert text.text == "".join(deltas)
    assert call.text == "[" + ",".join("1" * (COMPACT_PARTS + 1)) + ",1" * (COMPACT_PARTS * 2) + "]"
    # while streaming: never more than one run per COMPACT_PARTS deltas plus the deltas since
    assert max(length for length, _ in seen) <= COMPACT_PARTS + 3
    assert [so_far for _, so_far in seen[: len(deltas)]] == [
        "".join(deltas[: i + 1]) for i in range(len(deltas))
    ]


# --- tool calls ---------------------------------------------------------------------------------


async def test_tool_call_deltas_grouped_by_index() -> None:
    events = await run(
        [
            ToolCallDelta(0, '{"a":', "call_1", "f"),
            ToolCallDelta(0, "1}"),
            ToolCallDelta(1, "{", "call_2", "g"),
            ToolCallDelta(1, "}"),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    assert shape(events) == [
        "+tool_call",
        'Δtool_call:{"a":',
        "Δtool_call:1}",
        "-tool_call",
        "+tool_call",
        "Δtool_call:{",
        "Δtool_call:}",
        "-tool_call",
        "usage",
        "finished:tool_calls",
    ]
    check_invariants(events)
    assert usage_of(events) == Usage(completion_tokens=4)  # tool-call deltas count too
    calls = items_done(events)
    assert [(c.tool_index, c.call_id, c.name, c.text) for c in calls] == [
        (0, "call_1", "f", '{"a":1}'),
        (1, "call_2", "g", "{}"),
    ]
    assert all(c.id.startswith("fc_") for c in calls)


async def test_text_then_tool_call_closes_the_text_item() -> None:
    events = await run([TextDelta(M, "Let me see"), ToolCallDelta(0, "{}", "c", "f")])
    assert shape(events) == [
        "+message",
        "Δmessage:Let me see",
        "-message",
        "+tool_call",
        "Δtool_call:{}",
        "-tool_call",
        "usage",
        "finished:tool_calls",
    ]
    assert usage_of(events) == Usage(completion_tokens=2)


async def test_name_after_first_delta_buffers_arguments_then_announces() -> None:
    events = await run(
        [
            ToolCallDelta(0, '{"city"', "call_x"),
            ToolCallDelta(0, ': "Paris"'),
            ToolCallDelta(0, "}", name="get_weather"),
            ToolCallDelta(0, ""),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    assert shape(events) == [
        "+tool_call",
        'Δtool_call:{"city": "Paris"',  # everything buffered, in one delta, right after the announce
        "Δtool_call:}",
        "-tool_call",
        "usage",
        "finished:tool_calls",
    ]
    assert usage_of(events) == Usage(completion_tokens=4)  # every delta, empty ones included
    added = events[0]
    assert isinstance(added, ItemAdded)
    assert added.item.name == "get_weather"
    assert added.item.call_id == "call_x"
    assert added.item.tool_index == 0
    check_invariants(events)
    assert items_done(events)[0].text == '{"city": "Paris"}'


async def test_name_never_arriving_still_announces_the_call_at_close() -> None:
    events = await run([ToolCallDelta(0, "{"), ToolCallDelta(0, "}"), Finished(FinishReason.TOOL_CALLS)])
    assert shape(events) == ["+tool_call", "Δtool_call:{}", "-tool_call", "usage", "finished:tool_calls"]
    check_invariants(events)
    assert usage_of(events) == Usage(completion_tokens=2)
    call = items_done(events)[0]
    assert call.name is None
    assert call.tool_index == 0


async def test_missing_call_id_is_minted_with_call_prefix() -> None:
    events = await run([ToolCallDelta(0, "{}", name="f"), ToolCallDelta(1, "{}", name="g")])
    ids = [c.call_id for c in items_done(events)]
    assert all(i is not None and i.startswith("call_") and len(i) > len("call_") + 8 for i in ids)
    assert len(set(ids)) == 2


async def test_repeated_name_and_id_are_not_duplicated() -> None:
    events = await run(
        [
            ToolCallDelta(0, "", "call_1", "f"),
            ToolCallDelta(0, "{", "call_1", "f"),
            ToolCallDelta(0, "}", "call_1", "f"),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    assert shape(events) == [
        "+tool_call",
        "Δtool_call:{",
        "Δtool_call:}",
        "-tool_call",
        "usage",
        "finished:tool_calls",
    ]
    assert usage_of(events) == Usage(completion_tokens=3)
    call = items_done(events)[0]
    assert (call.call_id, call.name, call.text) == ("call_1", "f", "{}")


async def test_late_delta_for_a_closed_tool_call_is_dropped() -> None:
    events = await run(
        [
            ToolCallDelta(0, "{}", "c0", "f"),
            ToolCallDelta(1, "{}", "c1", "g"),
            ToolCallDelta(0, "extra"),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    check_invariants(events)
    assert [c.text for c in items_done(events)] == ["{}", "{}"]


# --- endings --------------------------------------------------------------------------------


async def test_stream_without_finished_ends_with_stop() -> None:
    events = await run([TextDelta(M, "hi")])
    assert shape(events)[-1] == "finished:stop"
    check_invariants(events)


async def test_stream_without_finished_after_tool_calls_ends_with_tool_calls() -> None:
    events = await run([ToolCallDelta(0, "{}", "c", "f")])
    assert shape(events)[-1] == "finished:tool_calls"


async def test_finish_stop_with_tool_calls_becomes_tool_calls() -> None:
    events = await run([ToolCallDelta(0, "{}", "c", "f"), Finished(FinishReason.STOP)])
    assert shape(events)[-1] == "finished:tool_calls"


async def test_finish_tool_calls_without_calls_is_normalised_to_stop() -> None:
    events = await run([TextDelta(M, "hi"), Finished(FinishReason.TOOL_CALLS)])
    assert shape(events)[-1] == "finished:stop"


async def test_length_is_kept_even_with_tool_calls() -> None:
    events = await run([ToolCallDelta(0, "{", "c", "f"), Finished(FinishReason.LENGTH)])
    assert shape(events)[-1] == "finished:length"


async def test_empty_stream_is_just_finished_stop() -> None:
    assert shape(await run([])) == ["finished:stop"]


async def test_usage_is_forwarded_as_it_comes_and_the_last_one_ends_the_stream() -> None:
    events = await run(
        [
            UsageReport(Usage(prompt_tokens=1)),
            TextDelta(M, "a"),
            UsageReport(Usage(prompt_tokens=5, completion_tokens=1)),
            Finished(FinishReason.STOP),
            TextDelta(M, "b"),  # after Finished: still part of the same message
        ]
    )
    assert shape(events) == [
        "usage",
        "+message",
        "Δmessage:a",
        "usage",
        "Δmessage:b",
        "-message",
        "usage",
        "finished:stop",
    ]
    assert [e.usage.prompt_tokens for e in events if isinstance(e, UsageReport)] == [1, 5, 5]
    usage = events[-2]
    assert isinstance(usage, UsageReport)
    # The engine counted completion tokens: its count stands, not the number of deltas (2).
    assert usage.usage == Usage(prompt_tokens=5, completion_tokens=1)
    check_invariants(events)


async def test_a_report_without_completion_tokens_keeps_its_prompt_count_and_counts_deltas() -> None:
    # A deadline cut the stream after the engine's early (prompt-only) report.
    events = await run(
        [
            UsageReport(Usage(prompt_tokens=7, cached_tokens=3, reasoning_tokens=9)),
            TextDelta(R, "hm"),
            TextDelta(M, "a"),
            ToolCallDelta(0, "{}", "c", "f"),
            Failed(ErrorInfo(ErrorKind.TIMEOUT, "too slow")),
        ]
    )
    assert shape(events)[-2:] == ["usage", "failed:timeout"]
    assert usage_of(events) == Usage(
        prompt_tokens=7, completion_tokens=3, cached_tokens=3, reasoning_tokens=1
    )
    check_invariants(events)


async def test_a_prompt_only_report_without_deltas_is_reported_as_is() -> None:
    events = await run([UsageReport(Usage(prompt_tokens=5, cached_tokens=2)), Finished(FinishReason.STOP)])
    assert shape(events) == ["usage", "usage", "finished:stop"]
    assert usage_of(events) == Usage(prompt_tokens=5, cached_tokens=2)


async def test_no_deltas_and_no_report_gives_no_usage() -> None:
    assert shape(await run([Failed(ErrorInfo(ErrorKind.TIMEOUT, "t"))])) == ["failed:timeout"]
    assert shape(await run([PromptFinished(), Finished(FinishReason.LENGTH)])) == [
        "PromptFinished",
        "finished:length",
    ]


async def test_engine_failure_mid_stream_leaves_the_cut_off_item_open_then_fails() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(M, "Hello")
        yield UsageReport(Usage(prompt_tokens=3, completion_tokens=1))
        raise EngineFailure("the GPU caught fire", code="gpu_fire")

    events = await run(engine())
    assert shape(events) == ["+message", "Δmessage:Hello", "usage", "usage", "failed:engine"]
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.error == ErrorInfo(ErrorKind.ENGINE, "the GPU caught fire", code="gpu_fire")
    check_invariants(events)


async def test_engine_failure_with_open_tool_call_never_reports_it_done() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield ToolCallDelta(0, '{"a"', "c", "f")
        raise EngineFailure("broken")

    events = await run(engine())
    assert shape(events) == ["+tool_call", 'Δtool_call:{"a"', "usage", "failed:engine"]
    assert events[0].item.cut_short and not events[0].item.done  # type: ignore[union-attr]
    assert usage_of(events) == Usage(completion_tokens=1)  # what streamed before the failure


async def test_unexpected_exception_becomes_failed_without_a_stack_trace() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(R, "x")
        raise KeyError("/secret/path/model.gguf")

    events = await run(engine())
    assert shape(events) == ["+reasoning", "Δreasoning:x", "usage", "failed:engine"]
    assert usage_of(events) == Usage(completion_tokens=1, reasoning_tokens=1)
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.error.kind is ErrorKind.ENGINE
    assert "KeyError" in failed.error.message
    assert "secret" not in failed.error.message
    assert "Traceback" not in failed.error.message
    assert "File " not in failed.error.message


async def test_failed_raw_event_ends_the_stream_and_closes_the_engine() -> None:
    log: list[str] = []

    async def engine() -> AsyncIterator[RawEvent]:
        try:
            yield TextDelta(M, "partial")
            yield Failed(ErrorInfo(ErrorKind.TIMEOUT, "too slow"))
            log.append("resumed after Failed")
            yield TextDelta(M, "never")
        finally:
            log.append("closed")

    events = await run(engine())
    assert shape(events) == ["+message", "Δmessage:partial", "usage", "failed:timeout"]
    assert usage_of(events) == Usage(completion_tokens=1)  # "never" was not read, so not counted
    assert log == ["closed"]


async def test_finished_then_failed_gives_only_failed() -> None:
    events = await run(
        [TextDelta(M, "a"), Finished(FinishReason.STOP), Failed(ErrorInfo(ErrorKind.ENGINE, "x"))]
    )
    assert shape(events)[-1] == "failed:engine"
    check_invariants(events)


async def test_progress_events_pass_through_in_order() -> None:
    progress: list[RawEvent] = [
        LoadStarted("m"),
        LoadProgress(0.5),
        LoadFinished(1.0),
        PromptStarted(),
        PromptProgress(1.0),
        PromptFinished(),
    ]
    events = await run([*progress, TextDelta(M, "x"), Finished(FinishReason.STOP)])
    assert events[:6] == progress
    assert all(a is b for a, b in zip(events[:6], progress, strict=True))
    assert shape(events)[6:] == ["+message", "Δmessage:x", "-message", "usage", "finished:stop"]
    assert usage_of(events) == Usage(completion_tokens=1)  # progress events are not tokens


async def test_progress_event_in_the_middle_does_not_close_the_item() -> None:
    events = await run([TextDelta(M, "a"), PromptProgress(0.5), TextDelta(M, "b")])
    assert shape(events) == [
        "+message",
        "Δmessage:a",
        "PromptProgress",
        "Δmessage:b",
        "-message",
        "usage",
        "finished:stop",
    ]
    assert usage_of(events) == Usage(completion_tokens=2)


async def test_closing_the_segmenter_early_closes_the_engine() -> None:
    log: list[str] = []

    async def engine() -> AsyncIterator[RawEvent]:
        try:
            while True:
                yield TextDelta(M, "x")
        finally:
            log.append("closed")

    stream = segment(engine())
    assert isinstance(await anext(stream), ItemAdded)
    await stream.aclose()
    assert log == ["closed"]


async def test_cancellation_propagates_and_is_not_turned_into_failed() -> None:
    log: list[str] = []
    started = asyncio.Event()

    async def engine() -> AsyncIterator[RawEvent]:
        try:
            yield TextDelta(M, "x")
            started.set()
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    out: list[Event] = []

    async def consume() -> None:
        async for event in segment(engine()):
            out.append(event)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert task.cancelled()
    assert log == ["cancelled"]
    assert not any(isinstance(e, Finished | Failed) for e in out)


# --- property: the invariants hold for any raw stream ---------------------------------------

raw_event = st.one_of(
    st.builds(TextDelta, st.sampled_from([M, R, F]), st.text(max_size=3)),
    st.builds(
        ToolCallDelta,
        st.integers(0, 2),
        st.text(max_size=3),
        st.one_of(st.none(), st.just("call_given")),
        st.one_of(st.none(), st.sampled_from(["f", "g"])),
    ),
    st.builds(UsageReport, st.builds(Usage, st.integers(0, 9), st.integers(0, 9))),
    st.builds(Finished, st.sampled_from(list(FinishReason))),
    st.builds(PromptProgress, st.floats(0, 1)),
)
ending = st.sampled_from(["none", "failed", "engine_failure", "crash"])


@settings(max_examples=150, deadline=None)
@given(st.lists(raw_event, max_size=25), ending)
def test_any_raw_stream_gives_a_well_formed_canonical_stream(raw: list[RawEvent], end: str) -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        for event in raw:
            yield event
        if end == "failed":
            yield Failed(ErrorInfo(ErrorKind.TIMEOUT, "t"))
        elif end == "engine_failure":
            raise EngineFailure("e")
        elif end == "crash":
            raise ValueError("v")

    events = asyncio.run(run(engine()))
    check_invariants(events)
    # usage: the engine's last report, unless it counted no completion tokens while deltas
    # streamed; then the deltas are counted, keeping the prompt and cached counts it reported
    deltas = [e for e in raw if isinstance(e, TextDelta | ToolCallDelta)]
    reports = [e.usage for e in raw if isinstance(e, UsageReport)]
    expected = reports[-1] if reports else None
    if deltas and (expected is None or expected.completion_tokens == 0):
        expected = Usage(
            prompt_tokens=expected.prompt_tokens if expected else 0,
            completion_tokens=len(deltas),
            cached_tokens=expected.cached_tokens if expected else 0,
            reasoning_tokens=sum(1 for e in deltas if isinstance(e, TextDelta) and e.channel is R),
        )
    assert usage_of(events) == expected
    terminal = events[-1]
    if end == "none":
        assert isinstance(terminal, Finished)
        any_tool = any(isinstance(e, ItemAdded) and e.item.kind is ItemKind.TOOL_CALL for e in events)
        if terminal.reason is FinishReason.TOOL_CALLS:
            assert any_tool
        if any_tool and not any(isinstance(e, Finished) and e.reason is not FinishReason.STOP for e in raw):
            assert terminal.reason is FinishReason.TOOL_CALLS
    else:
        assert isinstance(terminal, Failed)
    # every piece of text the engine sent arrives, on its channel, in order
    sent = "".join(e.text for e in raw if isinstance(e, TextDelta))
    got = "".join(
        e.text for e in events if isinstance(e, ItemDelta) and e.item.kind is not ItemKind.TOOL_CALL
    )
    assert got == sent


async def test_items_closed_by_a_length_stop_are_marked_cut_short() -> None:
    events = await run([TextDelta(ItemKind.MESSAGE, "Hello"), Finished(FinishReason.LENGTH)])
    (item,) = items_done(events)
    assert item.cut_short and item.text == "Hello"
    events = await run([TextDelta(ItemKind.MESSAGE, "Hello"), Finished(FinishReason.STOP)])
    assert not items_done(events)[0].cut_short


# --- server-side tools (the tool loop's events) ----------------------------------------------

FILES = ProviderInfo("plugin", "files", "files")


async def test_server_tool_calls_are_numbered_apart_and_do_not_make_the_finish_tool_calls() -> None:
    events = await run(
        [
            ToolCallDelta(0, '{"path": "a"}', call_id="call_s", name="read", provider=FILES),
            ToolResult("call_s", "read", "contents", FILES),
            TextDelta(M, "done"),
            Finished(FinishReason.STOP),
        ]
    )
    check_invariants(events)
    call, result, message = items_done(events)
    assert (call.kind, call.provider, call.tool_index) == (ItemKind.TOOL_CALL, FILES, 0)
    assert (result.kind, result.call_id, result.text, result.error) == (
        ItemKind.TOOL_RESULT,
        "call_s",
        "contents",
        None,
    )
    assert message.kind is M
    assert events[-1] == Finished(FinishReason.STOP)


async def test_a_client_call_after_a_server_call_gets_client_index_zero() -> None:
    events = await run(
        [
            ToolCallDelta(0, "{}", call_id="call_s", name="read", provider=FILES),
            ToolResult("call_s", "read", "", FILES, error="timed out"),
            ToolCallDelta(1, "{}", call_id="call_c", name="client_fn"),
            Finished(FinishReason.STOP),
        ]
    )
    server_call, result, client_call = items_done(events)
    assert result.error == "timed out"
    assert (server_call.tool_index, client_call.tool_index, client_call.provider) == (0, 0, None)
    assert events[-1] == Finished(FinishReason.TOOL_CALLS)


async def test_listing_and_approval_become_finished_items() -> None:
    tool = ServerTool("read", "Read a file", {"type": "object"}, FILES)
    events = await run(
        [
            ToolsListed(FILES, [tool]),
            ApprovalRequested("read", '{"path": "a"}', FILES),
            Finished(FinishReason.STOP),
        ]
    )
    check_invariants(events)
    listing, approval = items_done(events)
    assert (listing.kind, listing.tools, listing.id[:5]) == (ItemKind.TOOL_LIST, [tool], "mcpl_")
    assert (approval.kind, approval.name, approval.text) == (
        ItemKind.APPROVAL_REQUEST,
        "read",
        '{"path": "a"}',
    )


def test_a_stream_of_text_keeps_no_tool_tables() -> None:
    """A held stream keeps its segmenter for its life: the tool-call tables are made by the
    first tool call, not by every stream (bench/README.md, gateway "Round fifteen")."""
    from sluicegate.core.segmenter import Segments

    segments = Segments()
    out: list[Event] = []
    for text in ("Once", " upon", " a time"):
        assert segments.push(TextDelta(ItemKind.MESSAGE, text), out)
    assert segments.state.tool_by_index is None and segments.state.pending_args is None
    assert segments.push(ToolCallDelta(0, call_id="call_1", name=None, arguments='{"a"'), out)
    assert segments.push(ToolCallDelta(0, name="f", arguments=": 1}"), out)
    assert segments.state.tool_by_index is not None
    segments.end(out)
    done = [e.item for e in out if isinstance(e, ItemDone)]
    assert [i.text for i in done] == ["Once upon a time", '{"a": 1}']
