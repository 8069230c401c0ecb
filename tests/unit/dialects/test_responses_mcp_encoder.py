"""Server-side tools in the Responses encoder: raw tool-loop events → segmenter → the exact
`mcp_list_tools` / `mcp_call` / `mcp_approval_request` frames, each checked against the openai
SDK's own event and item types."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import cache
from typing import Any, get_args

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    ApprovalRequested,
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
from sluicegate.core.request import ProviderInfo, ServerTool
from sluicegate.core.segment import segment
from sluicegate.dialects.responses.encoder import ResponsesEncoder, ResponseState, items_output
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.transport.sse import frame_bytes

Json = dict[str, Any]
DOCS = ProviderInfo("ephemeral_mcp", "docs", "docs")
FILES = ProviderInfo("plugin", "mcp/files", "files")
SEARCH = ServerTool(
    "search", "Search the docs", {"type": "object", "properties": {"q": {"type": "string"}}}, DOCS
)
READ = ServerTool("read", "Read a file", {"type": "object"}, FILES, annotations={"readOnlyHint": True})


@cache
def _sdk_event_types() -> dict[str, Any]:
    (union, *_) = get_args(ResponseStreamEvent)
    return {cls.model_fields["type"].annotation.__args__[0]: cls for cls in get_args(union)}


def check_sdk(event: Json) -> None:
    """The event validates as the SDK's own class for its type (every field name and type).
    A cancelled response's `incomplete_details.reason` is Sluicegate's own, not in the SDK."""
    if event.get("response", {}).get("status") == "cancelled":
        event = {**event, "response": {**event["response"], "incomplete_details": None}}
    cls = _sdk_event_types()[event["type"]]
    TypeAdapter(cls).validate_python(event)
    if "response" in event:
        Response.model_validate(event["response"])


async def _aiter(raw: list[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in raw:
        yield event


class Run:
    def __init__(self, raw: list[RawEvent]) -> None:
        self.request = parse_responses_request({"model": "m", "input": "hi"})
        self.accumulator = Accumulator()
        self.encoder = ResponsesEncoder(ResponseState("resp_test", self.request), self.accumulator)
        self.raw = raw
        self.frames: list[bytes] = [frame_bytes(f) for f in self.encoder.opening()]

    async def run(self, *, stop_after_first_done: bool = False) -> Run:
        async for event in segment(_aiter(self.raw)):
            self.accumulator.feed(event)
            self.frames.extend(frame_bytes(f) for f in self.encoder.encode(event))
            if stop_after_first_done and isinstance(event, ItemDone):
                break
        return self

    @property
    def events(self) -> list[Json]:
        out = [json.loads(frame.split(b"\ndata: ")[1]) for frame in self.frames]
        assert [e["sequence_number"] for e in out] == list(range(len(out)))
        for event in out:
            check_sdk(event)
        return out

    @property
    def types(self) -> list[str]:
        return [e["type"].removeprefix("response.") for e in self.events]

    def done_items(self) -> list[Json]:
        return [e["item"] for e in self.events if e["type"] == "response.output_item.done"]


def call(index: int, call_id: str, name: str, *pieces: str, provider: ProviderInfo = DOCS) -> list[RawEvent]:
    first = ToolCallDelta(index, pieces[0], call_id=call_id, name=name, provider=provider)
    return [first, *(ToolCallDelta(index, p) for p in pieces[1:])]


OPENING = ["created", "in_progress"]
LISTED = ["output_item.added", "mcp_list_tools.in_progress", "mcp_list_tools.completed", "output_item.done"]


async def test_a_call_streams_list_call_result_then_the_answer() -> None:
    run = await Run(
        [
            ToolsListed(DOCS, [SEARCH]),
            *call(0, "call_a", "search", '{"q": ', '"mcp"}'),
            ToolResult("call_a", "search", "3 hits", DOCS),
            TextDelta(ItemKind.MESSAGE, "Found 3."),
            UsageReport(Usage(10, 5)),
            Finished(FinishReason.STOP),
        ]
    ).run()
    assert run.types == [
        *OPENING,
        *LISTED,
        "output_item.added",
        "mcp_call.in_progress",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "mcp_call.completed",
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
    listing_added, listing_done = events[2]["item"], events[5]["item"]
    assert listing_added == {
        "type": "mcp_list_tools",
        "id": listing_added["id"],
        "server_label": "docs",
        "tools": [],
        "error": None,
    }
    assert listing_done == {
        **listing_added,
        "tools": [
            {
                "name": "search",
                "description": "Search the docs",
                "input_schema": SEARCH.input_schema,
                "annotations": None,
            }
        ],
    }
    assert events[3] == {
        "type": "response.mcp_list_tools.in_progress",
        "sequence_number": 3,
        "item_id": listing_added["id"],
        "output_index": 0,
    }
    call_added = events[6]
    call_id = call_added["item"]["id"]
    assert call_added == {
        "type": "response.output_item.added",
        "sequence_number": 6,
        "output_index": 1,
        "item": {
            "type": "mcp_call",
            "id": call_id,
            "server_label": "docs",
            "name": "search",
            "arguments": "",
            "output": None,
            "error": None,
            "status": "in_progress",
            "approval_request_id": None,
        },
    }
    where = {"item_id": call_id, "output_index": 1}
    assert events[7] == {"type": "response.mcp_call.in_progress", "sequence_number": 7, **where}
    assert events[8] == {
        "type": "response.mcp_call_arguments.delta",
        "sequence_number": 8,
        **where,
        "delta": '{"q": ',
    }
    assert events[10] == {
        "type": "response.mcp_call_arguments.done",
        "sequence_number": 10,
        **where,
        "arguments": '{"q": "mcp"}',
    }
    assert events[11] == {"type": "response.mcp_call.completed", "sequence_number": 11, **where}
    assert events[12]["output_index"] == 1
    assert events[12]["item"] == {
        **call_added["item"],
        "arguments": '{"q": "mcp"}',
        "output": "3 hits",
        "status": "completed",
    }
    # The result made no output item: the answer is output 2, not 3.
    assert events[13]["output_index"] == 2 and events[13]["item"]["type"] == "message"
    final = events[-1]["response"]
    assert final["output"] == run.done_items()
    assert [i["type"] for i in final["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    # The stored response and the non-streaming body come from the same accumulator.
    assert items_output(run.accumulator.result.items) == final["output"]


async def test_parallel_calls_stay_open_until_each_result() -> None:
    run = await Run(
        [
            *call(0, "call_a", "search", '{"q": "a"}'),
            *call(1, "call_b", "read", '{"path": "x"}', provider=FILES),
            ToolResult("call_b", "read", "file x", FILES),
            ToolResult("call_a", "search", "hit a", DOCS),
            Finished(FinishReason.STOP),
        ]
    ).run()
    assert run.types == [
        *OPENING,
        "output_item.added",
        "mcp_call.in_progress",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "output_item.added",
        "mcp_call.in_progress",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "mcp_call.completed",
        "output_item.done",
        "mcp_call.completed",
        "output_item.done",
        "completed",
    ]
    events = run.events
    a_id, b_id = events[2]["item"]["id"], events[6]["item"]["id"]
    assert [
        (e["output_index"], e["item_id"]) for e in events if e["type"] == "response.mcp_call.completed"
    ] == [
        (1, b_id),
        (0, a_id),
    ]
    b_done, a_done = run.done_items()
    assert (b_done["id"], b_done["server_label"], b_done["output"]) == (b_id, "files", "file x")
    assert (a_done["id"], a_done["output"]) == (a_id, "hit a")
    final = events[-1]["response"]["output"]
    assert [i["id"] for i in final] == [a_id, b_id]  # in output order, not in order of completion
    assert final == [a_done, b_done]


async def test_a_failed_call_is_failed_with_the_sdk_error_object() -> None:
    run = await Run(
        [
            *call(0, "call_a", "search", "{}"),
            ToolResult("call_a", "search", "Tool error: index offline", DOCS, error="index offline"),
            TextDelta(ItemKind.MESSAGE, "The search is down."),
            Finished(FinishReason.STOP),
        ]
    ).run()
    types = run.types
    assert types[types.index("mcp_call_arguments.done") + 1 :][:2] == ["mcp_call.failed", "output_item.done"]
    failed = run.done_items()[0]
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "index offline"}],
    }
    assert failed["output"] == "Tool error: index offline"  # what the model was told
    assert run.events[-1]["response"]["output"][0] == failed


async def test_a_listing_that_failed() -> None:
    run = await Run([ToolsListed(DOCS, [], error="connection refused"), Finished(FinishReason.STOP)]).run()
    assert run.types == [
        *OPENING,
        "output_item.added",
        "mcp_list_tools.in_progress",
        "mcp_list_tools.failed",
        "output_item.done",
        "completed",
    ]
    assert run.done_items()[0]["error"] == "connection refused"
    assert run.done_items()[0]["tools"] == []


async def test_an_approval_request_is_one_item_and_ends_the_turn() -> None:
    run = await Run(
        [
            ToolsListed(DOCS, [SEARCH]),
            ApprovalRequested("search", '{"q": "x"}', DOCS),
            Finished(FinishReason.STOP),
        ]
    ).run()
    assert run.types == [*OPENING, *LISTED, "output_item.added", "output_item.done", "completed"]
    events = run.events
    request = events[6]["item"]
    assert request == {
        "type": "mcp_approval_request",
        "id": request["id"],
        "server_label": "docs",
        "name": "search",
        "arguments": '{"q": "x"}',
    }
    assert request["id"].startswith("mcpr_") and events[7]["item"] == request
    assert events[-1]["response"]["status"] == "completed"
    assert events[-1]["response"]["output"][1] == request


async def test_an_approved_call_names_its_approval_request() -> None:
    run = await Run(
        [
            *call(-1, "mcpr_123", "search", "{}"),
            ToolResult("mcpr_123", "search", "ok", DOCS),
            Finished(FinishReason.STOP),
        ]
    ).run()
    assert run.done_items()[0]["approval_request_id"] == "mcpr_123"


async def test_a_call_running_when_the_response_fails_is_closed_incomplete() -> None:
    # INTERNAL: `server_error` is among the openai SDK's literal codes, which these events are validated against
    run = await Run([*call(0, "call_a", "search", "{}"), Failed(ErrorInfo(ErrorKind.INTERNAL, "boom"))]).run()
    assert run.types[-3:] == ["mcp_call.failed", "output_item.done", "failed"]
    incomplete = run.done_items()[0]
    assert (incomplete["status"], incomplete["output"], incomplete["error"]) == ("incomplete", None, None)
    assert run.events[-1]["response"]["output"] == [incomplete]


async def test_a_cancel_while_a_call_runs_closes_it_incomplete() -> None:
    run = await Run([*call(0, "call_a", "search", "{}"), Finished(FinishReason.STOP)]).run(
        stop_after_first_done=True
    )
    run.frames.extend(frame_bytes(f) for f in run.encoder.cancelled("cancelled"))
    assert run.types[-3:] == ["mcp_call.failed", "output_item.done", "incomplete"]
    final = run.events[-1]["response"]
    assert final["status"] == "cancelled" and final["output"] == run.done_items()


async def test_live_snapshot_shows_a_running_call_in_progress() -> None:
    run = await Run([*call(0, "call_a", "search", "{}"), Finished(FinishReason.STOP)]).run(
        stop_after_first_done=True
    )
    snapshot = run.encoder.snapshot()
    assert [(i["type"], i["status"], i["output"]) for i in snapshot["output"]] == [
        ("mcp_call", "in_progress", None)
    ]


async def test_a_result_without_its_call_becomes_a_call_of_its_own() -> None:
    run = await Run([ToolResult("call_x", "search", "late", DOCS), Finished(FinishReason.STOP)]).run()
    assert run.types == [
        *OPENING,
        "output_item.added",
        "mcp_call.in_progress",
        "mcp_call.completed",
        "output_item.done",
        "completed",
    ]
    item = run.done_items()[0]
    assert (item["type"], item["output"], item["status"]) == ("mcp_call", "late", "completed")
    assert run.events[-1]["response"]["output"] == [item]


async def test_client_calls_next_to_server_calls_keep_their_function_call_events() -> None:
    run = await Run(
        [
            *call(0, "call_s", "search", "{}"),
            ToolResult("call_s", "search", "ok", DOCS),
            ToolCallDelta(1, "{}", call_id="call_c", name="client_fn"),
            Finished(FinishReason.STOP),
        ]
    ).run()
    types = run.types
    assert "function_call_arguments.done" in types and types.count("mcp_call_arguments.done") == 1
    final = run.events[-1]["response"]["output"]
    assert [(i["type"], i["status"]) for i in final] == [
        ("mcp_call", "completed"),
        ("function_call", "completed"),
    ]
    assert final[1]["call_id"] == "call_c"
