"""The Responses encoder: canonical events in, the exact frame sequence out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
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
    PromptProgress,
    Usage,
    UsageReport,
)
from sluicegate.dialects.responses.encoder import ResponsesEncoder, ResponseState
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.transport.sse import frame_bytes

Json = dict[str, Any]
PREFIX = {
    ItemKind.MESSAGE: "msg_",
    ItemKind.REFUSAL: "msg_",
    ItemKind.REASONING: "rs_",
    ItemKind.TOOL_CALL: "fc_",
}


def item(
    index: int, kind: ItemKind, *deltas: str, name: str | None = None, close: bool = True
) -> Iterator[Event]:
    """One item's canonical events; the item is mutated as the segmenter does, event by event."""
    it = Item(index=index, kind=kind, id=f"{PREFIX[kind]}{index}")
    if kind is ItemKind.TOOL_CALL:
        it.call_id, it.name, it.tool_index = f"call_{index}", name, 0
    yield ItemAdded(it)
    for delta in deltas:
        it.parts.append(delta)
        yield ItemDelta(it, delta)
    if close:
        it.text, it.parts, it.done = "".join(it.parts), [], True
        yield ItemDone(it)


def ending(reason: FinishReason = FinishReason.STOP, usage: Usage | None = None) -> Iterator[Event]:
    yield UsageReport(
        usage or Usage(prompt_tokens=7, completion_tokens=3, cached_tokens=2, reasoning_tokens=1)
    )
    yield Finished(reason)


class Run:
    def __init__(self, body: Json | None = None, *, names: str = "openai", background: bool = False) -> None:
        request = parse_responses_request(
            {"model": "m", "input": "hi", "background": background, **(body or {})}
        )
        self.accumulator = Accumulator()
        self.encoder = ResponsesEncoder(
            ResponseState("resp_test", request),
            self.accumulator,
            reasoning_names=names,  # type: ignore[arg-type]
        )
        self.frames: list[bytes] = [frame_bytes(f) for f in self.encoder.opening()]

    def feed(self, *streams: Iterable[Event]) -> Run:
        for stream in streams:
            for event in stream:
                self.accumulator.feed(event)
                self.frames.extend(frame_bytes(f) for f in self.encoder.encode(event))
        return self

    @property
    def events(self) -> list[Json]:
        out = []
        for frame in self.frames:
            head, data, tail = frame.split(b"\n")[0], frame.split(b"\n")[1], frame[-2:]
            assert tail == b"\n\n" and frame.count(b"\n") == 3, frame
            assert head.startswith(b"event: ") and data.startswith(b"data: ")
            event = json.loads(data[len(b"data: ") :])
            assert event["type"] == head[len(b"event: ") :].decode()
            out.append(event)
        assert [e["sequence_number"] for e in out] == list(range(len(out)))
        return out

    @property
    def types(self) -> list[str]:
        return [e["type"].removeprefix("response.") for e in self.events]


OPENING = ["created", "in_progress"]


def test_text_message_frames() -> None:
    run = Run().feed(item(0, ItemKind.MESSAGE, "Hel", "lo"), ending())
    assert run.types == [
        *OPENING,
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    events = run.events
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[2] == {
        "type": "response.output_item.added",
        "sequence_number": 2,
        "output_index": 0,
        "item": {
            "type": "message",
            "id": "msg_0",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
    }
    assert events[3]["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert events[4] == {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        "item_id": "msg_0",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hel",
        "logprobs": [],
    }
    assert events[6]["text"] == "Hello" and events[7]["part"]["text"] == "Hello"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["completed_at"] is not None
    assert final["output"] == [events[8]["item"]]
    assert final["output"][0]["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 10,
    }
    assert run.encoder.final == final


@pytest.mark.parametrize(("names", "prefix"), [("openai", "reasoning_text"), ("open_responses", "reasoning")])
def test_reasoning_then_message(names: str, prefix: str) -> None:
    run = Run(names=names).feed(
        item(0, ItemKind.REASONING, "hmm", "."), item(1, ItemKind.MESSAGE, "ok"), ending()
    )
    assert run.types == [
        *OPENING,
        "output_item.added",
        "content_part.added",
        f"{prefix}.delta",
        f"{prefix}.delta",
        f"{prefix}.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    events = run.events
    assert events[2]["item"] == {"type": "reasoning", "id": "rs_0", "summary": [], "content": []}
    assert events[3]["part"] == {"type": "reasoning_text", "text": ""}
    assert events[6] == {
        "type": f"response.{prefix}.done",
        "sequence_number": 6,
        "item_id": "rs_0",
        "output_index": 0,
        "content_index": 0,
        "text": "hmm.",
    }
    assert events[7]["part"] == {"type": "reasoning_text", "text": "hmm."}
    assert events[9]["output_index"] == 1 and events[9]["item"]["id"] == "msg_1"
    assert [i["id"] for i in events[-1]["response"]["output"]] == ["rs_0", "msg_1"]


def test_refusal_frames() -> None:
    run = Run().feed(item(0, ItemKind.REFUSAL, "No", "."), ending())
    assert run.types == [
        *OPENING,
        "output_item.added",
        "content_part.added",
        "refusal.delta",
        "refusal.delta",
        "refusal.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    events = run.events
    assert events[2]["item"]["type"] == "message" and events[2]["item"]["content"] == []
    assert events[3]["part"] == {"type": "refusal", "refusal": ""}
    assert events[4]["delta"] == "No" and events[4]["content_index"] == 0
    assert events[6]["refusal"] == "No." and events[7]["part"] == {"type": "refusal", "refusal": "No."}
    assert events[-1]["response"]["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]


def test_tool_call_frames() -> None:
    run = Run().feed(item(0, ItemKind.TOOL_CALL, '{"a"', ": 1}", name="f"), ending(FinishReason.TOOL_CALLS))
    assert run.types == [
        *OPENING,
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    events = run.events
    assert events[2]["item"] == {
        "type": "function_call",
        "id": "fc_0",
        "call_id": "call_0",
        "name": "f",
        "arguments": "",
        "status": "in_progress",
    }
    assert events[3] == {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 3,
        "item_id": "fc_0",
        "output_index": 0,
        "delta": '{"a"',
    }
    assert events[5] == {
        "type": "response.function_call_arguments.done",
        "sequence_number": 5,
        "item_id": "fc_0",
        "output_index": 0,
        "name": "f",
        "arguments": '{"a": 1}',
    }
    final = events[-1]["response"]
    assert final["status"] == "completed"  # a client tool call completes the response
    assert final["output"] == [{**events[2]["item"], "arguments": '{"a": 1}', "status": "completed"}]


def test_an_item_that_already_holds_its_first_delta_is_announced_empty() -> None:
    """The segmenter may put the first delta into the item before `ItemAdded` is encoded."""
    run = Run()
    call = Item(
        index=0, kind=ItemKind.TOOL_CALL, id="fc_0", call_id="call_0", name="f", tool_index=0, parts=['{"a"']
    )
    text = Item(index=1, kind=ItemKind.MESSAGE, id="msg_1", parts=["Hi"])
    run.feed([ItemAdded(call), ItemDelta(call, '{"a"')])
    call.text, call.parts, call.done = '{"a"', [], True
    run.feed([ItemDone(call), ItemAdded(text), ItemDelta(text, "Hi")])
    events = run.events
    assert events[2]["item"]["arguments"] == ""
    added_message = [e for e in events if e["type"] == "response.output_item.added"][1]
    assert added_message["item"]["content"] == []


@pytest.mark.parametrize(
    ("reason", "why"),
    [(FinishReason.LENGTH, "max_output_tokens"), (FinishReason.CONTENT_FILTER, "content_filter")],
)
def test_length_and_content_filter_end_incomplete(reason: FinishReason, why: str) -> None:
    run = Run({"max_output_tokens": 2}).feed(item(0, ItemKind.MESSAGE, "a", "b"), ending(reason))
    assert run.types[-2:] == ["output_item.done", "incomplete"]
    final = run.events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": why}
    assert final["max_output_tokens"] == 2 and final["output"][0]["content"][0]["text"] == "ab"


@pytest.mark.parametrize(
    ("kind", "code", "expected"),
    [
        (ErrorKind.ENGINE, None, "model_error"),
        (ErrorKind.ENGINE, "max_tool_rounds", "server_error"),
        (ErrorKind.ENGINE, "context_length_exceeded", "context_length_exceeded"),
        (ErrorKind.UPSTREAM, "rate_limit_exceeded", "rate_limit_exceeded"),
        (ErrorKind.UPSTREAM, "upstream_closed_early", "server_error"),
        (ErrorKind.RATE_LIMITED, None, "rate_limit_exceeded"),
        (ErrorKind.INTERNAL, None, "server_error"),
        (ErrorKind.TIMEOUT, None, "request_timeout"),
        (ErrorKind.IDLE_TIMEOUT, None, "request_timeout"),
    ],
)
def test_failure_ends_with_response_failed(kind: ErrorKind, code: str | None, expected: str) -> None:
    usage = Usage(prompt_tokens=4, completion_tokens=1)
    failure = [UsageReport(usage), Failed(ErrorInfo(kind, "it broke", code=code))]
    # The segmenter leaves an item cut off by a failure open: it is never reported done.
    run = Run().feed(item(0, ItemKind.MESSAGE, "partial", close=False), failure)
    assert run.types[-2:] == ["output_text.delta", "failed"]
    final = run.events[-1]["response"]
    assert final["status"] == "failed"
    assert final["error"] == {"code": expected, "message": "it broke"}
    assert final["output"][0]["content"][0]["text"] == "partial"
    assert final["output"][0]["status"] == "incomplete"
    assert final["usage"]["input_tokens"] == 4 and final["usage"]["output_tokens"] == 1


def test_a_tool_call_cut_off_by_a_failure_is_never_done() -> None:
    failure = [Failed(ErrorInfo(ErrorKind.ENGINE, "boom"))]
    run = Run({"tools": [{"type": "function", "name": "f"}]}).feed(
        item(0, ItemKind.TOOL_CALL, '{"pa', name="f", close=False), failure
    )
    assert "output_item.done" not in run.types and "function_call_arguments.done" not in run.types
    assert run.types[-2:] == ["function_call_arguments.delta", "failed"]
    final = run.events[-1]["response"]
    assert final["output"][0]["status"] == "incomplete"


def test_without_a_usage_report_the_usage_is_still_complete() -> None:
    # No report at all: the object still has every usage field, counting what streamed.
    run = Run().feed(item(0, ItemKind.MESSAGE, "x"), [Finished(FinishReason.STOP)])
    usage = run.events[-1]["response"]["usage"]
    assert usage == {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 1,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1,
    }


def test_a_cancelled_response_keeps_the_usage_of_what_streamed() -> None:
    usage = Usage(prompt_tokens=6)  # the engine's early, prompt-only report
    run = Run().feed([UsageReport(usage)], item(0, ItemKind.MESSAGE, "a", " b", close=False))
    run.frames.extend(frame_bytes(f) for f in run.encoder.cancelled("cancelled"))
    final = run.events[-1]["response"]
    assert final["status"] == "cancelled"
    assert final["output"][0]["content"][0]["text"] == "a b"
    assert final["usage"]["input_tokens"] == 6 and final["usage"]["output_tokens"] == 2


def test_progress_events_make_no_frames() -> None:
    run = Run()
    before = len(run.frames)
    run.feed([PromptProgress(0.5)])
    assert len(run.frames) == before


def test_background_opening_is_created_then_queued_then_in_progress_with_the_first_event() -> None:
    run = Run(background=True)
    assert run.types == ["created", "queued"]
    assert run.encoder.snapshot()["status"] == "queued"
    run.feed([PromptProgress(0.5)])
    assert run.types == ["created", "queued", "in_progress"]
    assert [e["response"]["status"] for e in run.events] == ["queued", "queued", "in_progress"]
    assert all(e["response"]["background"] is True for e in run.events)


def test_live_snapshot_marks_open_items_in_progress_and_cancel_marks_them_incomplete() -> None:
    run = Run().feed(
        item(0, ItemKind.MESSAGE, "done"), item(1, ItemKind.MESSAGE, "still", " going", close=False)
    )
    live = run.encoder.snapshot()
    assert live["status"] == "in_progress" and live["usage"] is None
    assert [(i["status"], i["content"][0]["text"]) for i in live["output"]] == [
        ("completed", "done"),
        ("in_progress", "still going"),
    ]
    run.frames.extend(frame_bytes(f) for f in run.encoder.cancelled("client_disconnected"))
    final = run.events[-1]
    assert final["type"] == "response.incomplete"
    response = final["response"]
    assert response["status"] == "cancelled"
    assert response["incomplete_details"] == {"reason": "client_disconnected"}
    assert [(i["status"], i["content"][0]["text"]) for i in response["output"]] == [
        ("completed", "done"),
        ("incomplete", "still going"),
    ]
    assert run.encoder.snapshot() == response == run.encoder.final


def test_response_object_echoes_the_request() -> None:
    run = Run(
        {
            "instructions": "Be brief.",
            "temperature": 0.2,
            "metadata": {"a": "b"},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": "required",
            "previous_response_id": "resp_prev",
        }
    )
    created = run.events[0]["response"]
    assert created["id"] == "resp_test" and created["object"] == "response" and created["model"] == "m"
    assert created["instructions"] == "Be brief." and created["temperature"] == 0.2
    assert created["metadata"] == {"a": "b"} and created["tool_choice"] == "required"
    assert created["previous_response_id"] == "resp_prev"
    assert created["tools"] == [
        {
            "type": "function",
            "name": "f",
            "description": None,
            "parameters": {"type": "object"},
            "strict": None,
        }
    ]
    assert created["top_p"] == 1.0 and created["presence_penalty"] == 0.0 and created["top_logprobs"] == 0


def test_text_delta_fast_path_writes_the_generic_bytes() -> None:
    """The per-token `output_text.delta` frame is built from cached bytes: it must equal what
    the generic `_frame` writes, key order and escaping included, for every item."""
    run = Run()
    encoder = run.encoder
    texts = ['He said "hi"\n', "é ✓ \\ </script>", "\u2028"]
    for index in range(2):
        it = Item(index=index, kind=ItemKind.MESSAGE, id=f'msg_{index}"x')
        encoder.encode(ItemAdded(it))
        for text in texts:
            seq = encoder.seq
            (frame,) = encoder.encode(ItemDelta(it, text))
            expected = {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "item_id": it.id,
                "output_index": index,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
            assert frame.data == orjson.dumps(expected)
            assert frame.event == "response.output_text.delta"
            assert encoder.seq == seq + 1
