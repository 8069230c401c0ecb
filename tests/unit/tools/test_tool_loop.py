"""tools/loop.py: server tools run between engine rounds; every round streams; one ending."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorKind
from sluicegate.core.events import (
    ApprovalRequested,
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDone,
    ItemKind,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    ToolResult,
    ToolsListed,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ChatRequest, Message, ServerTool, ToolSpec
from sluicegate.core.segment import segment
from sluicegate.engines.models import Model
from sluicegate.engines.rounds import loop_generation, model_rounds
from sluicegate.engines.scripted import ScriptedEngine, parse_script
from sluicegate.tools.loop import MAX_ROUNDS_CODE, run_tool_loop
from tool_fakes import PROVIDER, FakeToolSet, echo

CALL_WEATHER = {"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]}
ANSWER = {"when": {"last_role": "tool"}, "content": "It is sunny."}


class Rounds:
    """`open_round` over a scripted engine, recording each round's request."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.engine = ScriptedEngine("m", parse_script({"replies": replies}, "test script"))
        self.requests: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        self.requests.append(request)
        return self.engine.generate(request)


def chat(text: str = "weather in Paris?", tools: list[ToolSpec] | None = None) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", text)], tools=tools or [])


async def raw(
    rounds: Rounds, toolset: FakeToolSet, request: ChatRequest | None = None, **kw: Any
) -> list[RawEvent]:
    loop = run_tool_loop(request or chat(), toolset, rounds, max_rounds=kw.pop("max_rounds", 25), **kw)
    return [event async for event in loop]


async def canonical(rounds: Rounds, toolset: FakeToolSet, request: ChatRequest | None = None) -> list[Event]:
    loop = run_tool_loop(request or chat(), toolset, rounds, max_rounds=25)
    return [event async for event in segment(loop)]


def results(events: list[RawEvent]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


def tool_message(request: ChatRequest) -> Message:
    assert request.messages[-1].role == "tool"
    return request.messages[-1]


async def test_a_call_runs_and_the_model_answers_in_the_same_response() -> None:
    rounds = Rounds([ANSWER, CALL_WEATHER])
    toolset = FakeToolSet({"weather": echo})
    events = await raw(rounds, toolset)
    assert isinstance(events[0], ToolsListed) and events[0].provider == PROVIDER
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "weather" and calls[0].provider == PROVIDER and calls[0].call_id
    assert [r.output for r in results(events)] == ['echo {"city": "Paris"}']
    assert results(events)[0].call_id == calls[0].call_id
    assert [e for e in events if isinstance(e, Finished)] == [Finished(FinishReason.STOP)]
    assert events[-1] == Finished(FinishReason.STOP)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "It is sunny."
    # The second round saw the call and its result, and the server tools were offered.
    first, second = rounds.requests
    assert [t.name for t in first.tools] == ["weather"]
    assistant, tool = second.messages[-2:]
    assert assistant.role == "assistant" and [c.name for c in assistant.tool_calls] == ["weather"]
    assert assistant.tool_calls[0].id == calls[0].call_id
    assert assistant.tool_calls[0].arguments == '{"city": "Paris"}'
    assert tool.tool_call_id == calls[0].call_id and tool.content == 'echo {"city": "Paris"}'


async def test_rounds_become_separate_items_in_one_canonical_stream() -> None:
    rounds = Rounds([ANSWER, {"reasoning": "Need the tool.", **CALL_WEATHER}])
    events = await canonical(rounds, FakeToolSet({"weather": echo}))
    done = [e.item for e in events if isinstance(e, ItemDone)]
    assert [i.kind for i in done] == [
        ItemKind.TOOL_LIST,
        ItemKind.REASONING,
        ItemKind.TOOL_CALL,
        ItemKind.TOOL_RESULT,
        ItemKind.MESSAGE,
    ]
    call, result = done[2], done[3]
    assert call.provider == PROVIDER and result.call_id == call.call_id
    assert events[-1] == Finished(FinishReason.STOP), "server calls do not make the finish tool_calls"
    # The reasoning went back with the call, so the model keeps its train of thought.
    assert rounds.requests[1].messages[-2].reasoning == "Need the tool."


async def test_the_same_engine_index_in_two_rounds_makes_two_calls() -> None:
    # A model that calls twice in a row (round limit 3) gets three distinct call items.
    looping = Rounds([CALL_WEATHER])
    loop = run_tool_loop(chat(), FakeToolSet({"weather": echo}), looping, max_rounds=3)
    events = [e async for e in segment(loop)]
    calls = [e.item for e in events if isinstance(e, ItemDone) and e.item.kind is ItemKind.TOOL_CALL]
    assert len(calls) == 3 and len({c.call_id for c in calls}) == 3
    assert all(c.text == '{"city": "Paris"}' for c in calls)


async def test_parallel_calls_run_at_the_same_time_and_report_in_call_order() -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def slow_a(arguments: dict[str, Any]) -> str:
        a_started.set()
        await asyncio.wait_for(b_started.wait(), 30)  # would deadlock if run one after the other
        await asyncio.sleep(0.01)
        return "A"

    async def fast_b(arguments: dict[str, Any]) -> str:
        b_started.set()
        await asyncio.wait_for(a_started.wait(), 30)
        return "B"

    rounds = Rounds([ANSWER, {"tool_calls": [{"name": "a"}, {"name": "b"}]}])
    events = await raw(rounds, FakeToolSet({"a": slow_a, "b": fast_b}))
    assert [(r.name, r.output) for r in results(events)] == [("a", "A"), ("b", "B")]
    second = rounds.requests[1]
    assert [m.role for m in second.messages[-3:]] == ["assistant", "tool", "tool"]
    assert [m.content for m in second.messages[-2:]] == ["A", "B"]


async def test_a_tool_that_raises_is_an_error_result_and_the_model_is_told() -> None:
    async def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    rounds = Rounds([ANSWER, CALL_WEATHER])
    events = await raw(rounds, FakeToolSet({"weather": broken}))
    (result,) = results(events)
    assert result.error == "disk on fire"
    assert "disk on fire" in tool_message(rounds.requests[1]).text
    assert events[-1] == Finished(FinishReason.STOP)


async def test_a_toolset_that_raises_is_still_only_an_error_result() -> None:
    class Exploding(FakeToolSet):
        async def call(self, name: str, arguments_json: str) -> Any:
            raise ValueError("provider bug")

    rounds = Rounds([ANSWER, CALL_WEATHER])
    events = await raw(rounds, Exploding({"weather": echo}))
    assert results(events)[0].error == "provider bug"
    assert events[-1] == Finished(FinishReason.STOP)


async def test_a_tool_timeout_is_an_error_result() -> None:
    async def hangs(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(3600)
        return "never"

    rounds = Rounds([ANSWER, CALL_WEATHER])
    events = await raw(rounds, FakeToolSet({"weather": hangs}, timeout=0.05))
    assert results(events)[0].error == "timed out"
    assert "timed out" in tool_message(rounds.requests[1]).text
    assert events[-1] == Finished(FinishReason.STOP)


async def test_unknown_tool_is_an_error_result_under_the_first_provider() -> None:
    rounds = Rounds([ANSWER, {"tool_calls": [{"name": "teleport", "arguments": {}}]}])
    toolset = FakeToolSet({"weather": echo})
    events = await raw(rounds, toolset)
    (result,) = results(events)
    assert result.error == "Cannot find tool with name teleport."
    assert result.provider == PROVIDER and toolset.calls == []
    told = tool_message(rounds.requests[1]).text
    assert "teleport" in told and "weather" in told, "the model learns what exists"
    assert events[-1] == Finished(FinishReason.STOP)


async def test_bad_json_and_schema_failures_are_error_results() -> None:
    rounds = Rounds(
        [
            ANSWER,
            {"tool_calls": [{"name": "weather", "arguments": "{oops"}, {"name": "weather", "arguments": {}}]},
        ]
    )
    events = await raw(rounds, FakeToolSet({"weather": echo}, required={"weather": ["city"]}))
    assert [r.error for r in results(events)] == ["invalid JSON", "schema mismatch"]
    assert rounds.requests[1].messages[-3].tool_calls[0].arguments == "{oops", "raw arguments go back"
    assert events[-1] == Finished(FinishReason.STOP)


async def test_round_limit_ends_with_a_clear_failure_after_running_the_last_calls() -> None:
    rounds = Rounds([CALL_WEATHER])  # the model never stops calling
    toolset = FakeToolSet({"weather": echo})
    events = await raw(rounds, toolset, max_rounds=3)
    assert len(rounds.requests) == 3 and len(toolset.calls) == 3
    assert len(results(events)) == 3, "the last round's calls ran: stored state has call and result"
    assert not [e for e in events if isinstance(e, Finished)]
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.error.code == MAX_ROUNDS_CODE
    assert "3 tool rounds" in failed.error.message


async def test_mixed_round_runs_server_calls_and_returns_client_calls() -> None:
    client_tool = ToolSpec("lookup", parameters={"type": "object"})
    rounds = Rounds([ANSWER, {"tool_calls": [{"name": "weather"}, {"name": "lookup"}]}])
    toolset = FakeToolSet({"weather": echo})
    events = [
        e async for e in segment(run_tool_loop(chat(tools=[client_tool]), toolset, rounds, max_rounds=25))
    ]
    assert len(rounds.requests) == 1, "the turn ends: the client runs its call"
    done = [e.item for e in events if isinstance(e, ItemDone)]
    server_call, client_call = [i for i in done if i.kind is ItemKind.TOOL_CALL]
    assert server_call.provider == PROVIDER and client_call.provider is None
    assert client_call.tool_index == 0, "clients number only their own calls"
    assert [i.kind for i in done].count(ItemKind.TOOL_RESULT) == 1
    assert events[-1] == Finished(FinishReason.TOOL_CALLS)


async def test_a_request_tool_wins_a_name_clash() -> None:
    own = ToolSpec("weather", "the client's weather", {"type": "object"})
    rounds = Rounds([ANSWER, CALL_WEATHER])
    toolset = FakeToolSet({"weather": echo, "other": echo})
    events = await raw(rounds, toolset, chat(tools=[own]))
    assert toolset.calls == [] and results(events) == []
    assert rounds.requests[0].tools == [own, toolset.tools["other"].spec()]
    call = next(e for e in events if isinstance(e, ToolCallDelta))
    assert call.provider is None


async def test_usage_is_summed_over_rounds() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "cached_tokens": 2, "reasoning_tokens": 1}
    rounds = Rounds([{**ANSWER, "usage": usage}, {**CALL_WEATHER, "usage": usage}])
    events = await canonical(rounds, FakeToolSet({"weather": echo}))
    reports = [e.usage for e in events if isinstance(e, UsageReport)]
    assert reports[-1] == Usage(20, 6, 4, 2)
    assert events[-2] == UsageReport(Usage(20, 6, 4, 2))


async def test_usage_without_overrides_counts_every_round() -> None:
    rounds = Rounds([ANSWER, CALL_WEATHER])
    events = await raw(rounds, FakeToolSet({"weather": echo}))
    first_run = [e async for e in rounds.engine.generate(rounds.requests[0])]
    second_run = [e async for e in rounds.engine.generate(rounds.requests[1])]
    one = [e.usage for e in first_run if isinstance(e, UsageReport)][-1]
    two = [e.usage for e in second_run if isinstance(e, UsageReport)][-1]
    final = [e.usage for e in events if isinstance(e, UsageReport)][-1]
    assert final.prompt_tokens == one.prompt_tokens + two.prompt_tokens
    assert final.completion_tokens == one.completion_tokens + two.completion_tokens > 0


async def test_approval_needed_holds_the_call_back_and_ends_the_turn() -> None:
    rounds = Rounds([ANSWER, CALL_WEATHER])
    toolset = FakeToolSet({"weather": echo})

    def needs(tool: ServerTool) -> bool:
        return tool.name == "weather"

    events = await raw(rounds, toolset, needs_approval=needs)
    assert toolset.calls == [] and len(rounds.requests) == 1
    assert not [e for e in events if isinstance(e, ToolCallDelta)], "shown as a request, not a call"
    (approval,) = [e for e in events if isinstance(e, ApprovalRequested)]
    assert approval == ApprovalRequested("weather", '{"city": "Paris"}', PROVIDER)
    assert isinstance(events[-1], Finished)


async def test_a_call_whose_name_comes_late_is_still_the_servers() -> None:
    async def engine(request: ChatRequest) -> AsyncIterator[RawEvent]:
        async def events() -> AsyncIterator[RawEvent]:
            if request.messages[-1].role == "tool":
                yield TextDelta(ItemKind.MESSAGE, "done")
                yield Finished(FinishReason.STOP)
                return
            yield ToolCallDelta(0, '{"city":', "call_1")
            yield ToolCallDelta(0, ' "Oslo"}', name="weather")
            yield Finished(FinishReason.TOOL_CALLS)

        return events()

    toolset = FakeToolSet({"weather": echo})
    events = [e async for e in run_tool_loop(chat(), toolset, engine, max_rounds=5)]
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls == [ToolCallDelta(0, '{"city": "Oslo"}', "call_1", "weather", PROVIDER)]
    assert toolset.calls == [("weather", '{"city": "Oslo"}')]


async def test_an_engine_failure_mid_round_ends_the_response() -> None:
    rounds = Rounds([{**ANSWER, "error_after_deltas": 1, "error_message": "boom"}, CALL_WEATHER])
    events = await canonical(rounds, FakeToolSet({"weather": echo}))
    assert isinstance(events[-1], Failed) and events[-1].error.message == "boom"
    kinds = [e.item.kind for e in events if isinstance(e, ItemDone)]
    assert ItemKind.TOOL_RESULT in kinds, "what ran before stays in the output"


async def test_a_full_queue_on_a_later_round_fails_the_response_clearly() -> None:
    engine = ScriptedEngine("m", parse_script({"replies": [ANSWER, CALL_WEATHER]}, "t"))
    model = Model(engine, max_concurrency=1, max_queue=0)
    blocker: AsyncIterator[RawEvent] | None = None

    async def occupy(arguments: dict[str, Any]) -> str:
        nonlocal blocker
        blocker = model.open(chat()).events
        await blocker.__anext__()  # holds the only slot while the loop wants it back
        return "ok"

    first = model.open(chat())
    loop = run_tool_loop(chat(), FakeToolSet({"weather": occupy}), model_rounds(model, first), max_rounds=5)
    events = [e async for e in loop]
    assert isinstance(events[-1], Failed) and events[-1].error.kind is ErrorKind.OVERLOADED
    assert blocker is not None
    await blocker.aclose()  # type: ignore[attr-defined]


async def test_the_models_slot_is_free_while_tools_run() -> None:
    engine = ScriptedEngine("m", parse_script({"replies": [ANSWER, CALL_WEATHER]}, "t"))
    model = Model(engine, max_concurrency=1, max_queue=0)
    seen: list[int] = []

    async def check(arguments: dict[str, Any]) -> str:
        seen.append(model.instances[0]._active)
        return "ok"

    request = chat()
    first = model.open(request)
    loop = run_tool_loop(request, FakeToolSet({"weather": check}), model_rounds(model, first), max_rounds=5)
    events = [e async for e in loop]
    assert seen == [0], "no generation holds the slot while the tool runs"
    assert events[-1] == Finished(FinishReason.STOP)
    assert model.instances[0]._active == 0


async def test_a_loop_closed_before_it_started_gives_the_first_rounds_queue_place_back() -> None:
    engine = ScriptedEngine("m", parse_script({"replies": [ANSWER, CALL_WEATHER]}, "t"))
    model = Model(engine, max_concurrency=1, max_queue=1)
    first = model.open(chat())
    rounds = run_tool_loop(chat(), FakeToolSet({"weather": echo}), model_rounds(model, first), max_rounds=5)
    generation = loop_generation(first, rounds)
    assert (generation.instance_id, model.instances[0]._waiting) == (first.instance_id, 1)
    await generation.aclose()  # never iterated: the loop never reached its first round
    assert model.instances[0]._waiting == 0
    assert not model.busy


async def test_a_loop_generation_iterated_to_the_end_then_closed_is_fine() -> None:
    engine = ScriptedEngine("m", parse_script({"replies": [ANSWER, CALL_WEATHER]}, "t"))
    model = Model(engine, max_concurrency=1, max_queue=1)
    first = model.open(chat())
    rounds = run_tool_loop(chat(), FakeToolSet({"weather": echo}), model_rounds(model, first), max_rounds=5)
    generation = loop_generation(first, rounds)
    events = [e async for e in generation.events]
    await generation.aclose()
    assert events[-1] == Finished(FinishReason.STOP)
    assert not model.busy


async def test_cancelling_the_response_cancels_running_tool_calls() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def hangs(arguments: dict[str, Any]) -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    rounds = Rounds([ANSWER, CALL_WEATHER])
    loop = run_tool_loop(chat(), FakeToolSet({"weather": hangs}), rounds, max_rounds=5)

    async def consume() -> None:
        async for _ in segment(loop):
            pass

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(cancelled.wait(), 30)


async def test_the_idle_timer_still_applies_while_tools_run() -> None:
    cancelled = asyncio.Event()

    async def hangs(arguments: dict[str, Any]) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    rounds = Rounds([ANSWER, CALL_WEATHER])
    loop = run_tool_loop(chat(), FakeToolSet({"weather": hangs}), rounds, max_rounds=5)
    events = [e async for e in segment(loop, Deadline.of(None, 0.2))]
    assert isinstance(events[-1], Failed) and events[-1].error.kind is ErrorKind.IDLE_TIMEOUT
    assert cancelled.is_set()
    kinds = [e.item.kind for e in events if isinstance(e, ItemDone)]
    assert ItemKind.TOOL_CALL in kinds


async def test_no_calls_means_one_round_exactly_as_without_the_loop() -> None:
    rounds = Rounds([{"content": "Just text."}])
    events = await raw(rounds, FakeToolSet({"weather": echo}))
    direct = [e async for e in rounds.engine.generate(rounds.requests[0])]
    assert len(rounds.requests) == 1
    assert events[1:] == direct


async def test_a_forced_tool_choice_applies_to_the_first_round_only() -> None:
    rounds = Rounds([ANSWER, CALL_WEATHER])
    request = chat()
    request.tool_choice = "required"
    events = await raw(rounds, FakeToolSet({"weather": echo}), request)
    assert [r.tool_choice for r in rounds.requests] == ["required", "auto"]
    assert events[-1] == Finished(FinishReason.STOP)
