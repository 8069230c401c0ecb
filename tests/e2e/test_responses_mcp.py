"""MCP tools in the Responses API, end to end: a real server, the real streamable-HTTP MCP test
server named in the request (`{type: "mcp", server_url}`), the scripted engine as the model
(`scripts/responses_mcp.yaml`), and the official openai SDK as the client, stream helper included.
Every event is validated against the SDK's own types and, where it defines them, the Open
Responses schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import Server, run_server, scripted, write_config
from responses_support import assert_openai_error, poll, stream_raw, validate_mixed_event

from mcp_fixtures import HttpMcpServer, mcp_http_server, stdio_entry, write_mcp_json

pytestmark = pytest.mark.e2e
__all__ = ["mcp_http_server"]  # the fixture, found by pytest through this module

MODEL = "mcp"
ROUNDS = 3  # [tools] max_rounds
Json = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, mcp_http_server: HttpMcpServer) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("responses-mcp")
    mcp_json = write_mcp_json(folder, {"calc": stdio_entry()})  # configured: offered to every request
    config = write_config(
        folder,
        {"data_dir": str(folder / "data")},
        [scripted(MODEL, "responses_mcp.yaml")],
        # The test MCP server listens on loopback: request servers on, loopback allow-listed.
        {
            "tools": {
                "allow_request_servers": True,
                "allowed_hosts": ["127.0.0.1"],
                "mcp_config": str(mcp_json),
                "max_rounds": ROUNDS,
            }
        },
    )
    with run_server(folder, config) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60.0) as sdk:
        yield sdk


def web(mcp_http_server: HttpMcpServer, **extra: Any) -> Json:
    return {
        "type": "mcp",
        "server_label": "web",
        "server_url": mcp_http_server.url,
        "require_approval": "never",
        **extra,
    }


def body(text: str, *tools: Json, **extra: Any) -> Json:
    return {"model": MODEL, "input": text, "tools": list(tools), "stream": True, **extra}


def raw_events(server: Server, payload: Json) -> list[Json]:
    """The stream as sent, each event validated; sequence numbers count from 0."""
    events = stream_raw(server.base_url, payload).events
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        validate_mixed_event(event)
    return events


def collapsed(events: list[Json]) -> list[str]:
    """Event types with runs of the same delta type collapsed to one."""
    out: list[str] = []
    for event in events:
        kind = event["type"].removeprefix("response.")
        if not (kind.endswith(".delta") and out and out[-1] == kind):
            out.append(kind)
    return out


def done_items(events: list[Json]) -> list[Json]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


LISTING = ["output_item.added", "mcp_list_tools.in_progress", "mcp_list_tools.completed", "output_item.done"]
CALL = [
    "output_item.added",
    "mcp_call.in_progress",
    "mcp_call_arguments.delta",
    "mcp_call_arguments.done",
]
MESSAGE = [
    "output_item.added",
    "content_part.added",
    "output_text.delta",
    "output_text.done",
    "content_part.done",
    "output_item.done",
]


def test_a_call_streams_listing_call_result_and_answer(
    server: Server, mcp_http_server: HttpMcpServer
) -> None:
    events = raw_events(server, body("mcp weather in Paris?", web(mcp_http_server)))
    assert collapsed(events) == [
        "created",
        "in_progress",
        *LISTING,
        *CALL,
        "mcp_call.completed",
        "output_item.done",
        *MESSAGE,
        "completed",
    ]
    listing, call, message = done_items(events)
    assert listing["server_label"] == "web" and listing["error"] is None
    assert "web_get_weather" in [t["name"] for t in listing["tools"]]
    weather = next(t for t in listing["tools"] if t["name"] == "web_get_weather")
    assert weather["input_schema"]["properties"]["city"]["type"] == "string"
    assert (call["type"], call["server_label"], call["name"], call["status"]) == (
        "mcp_call",
        "web",
        "web_get_weather",
        "completed",
    )
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert call["output"] == "Paris: 18°C, light rain (celsius)" and call["error"] is None
    assert message["content"][0]["text"] == "In Paris it is 18°C with light rain."
    final = events[-1]["response"]
    assert final["output"] == [listing, call, message]  # the same objects that streamed
    assert final["tools"][0]["headers"] is None
    # The events of one item share its id and output index.
    assert {
        (e["item_id"], e["output_index"]) for e in events if e["type"].startswith("response.mcp_call")
    } == {(call["id"], 1)}
    stored = httpx.get(f"{server.api_url}/responses/{final['id']}", timeout=10).json()
    assert stored["output"] == final["output"]


def test_the_sdk_stream_helper_accepts_a_tool_round(
    client: openai.OpenAI, mcp_http_server: HttpMcpServer
) -> None:
    with client.responses.stream(
        model=MODEL,
        input="mcp weather in Paris?",
        tools=[web(mcp_http_server)],  # type: ignore[list-item]
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.mcp_call.completed" in types
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == "In Paris it is 18°C with light rain."
    created = client.responses.create(
        model=MODEL,
        input="mcp weather in Paris?",
        tools=[web(mcp_http_server)],
        stream=True,  # type: ignore[list-item]
    )
    assert [e.type for e in created][-1] == "response.completed"


def test_parallel_calls(server: Server, mcp_http_server: HttpMcpServer) -> None:
    events = raw_events(server, body("mcp parallel please", web(mcp_http_server)))
    assert collapsed(events) == [
        "created",
        "in_progress",
        *LISTING,
        *CALL,
        *CALL,
        "mcp_call.completed",
        "output_item.done",
        "mcp_call.completed",
        "output_item.done",
        *MESSAGE,
        "completed",
    ]
    _, add, echo, message = done_items(events)
    assert (add["name"], add["output"], echo["name"], echo["output"]) == ("web_add", "5", "web_echo", "hi")
    assert message["content"][0]["text"] == "2 + 3 = 5, and the echo said hi."
    assert [i["id"] for i in events[-1]["response"]["output"][1:3]] == [add["id"], echo["id"]]


def test_a_failing_tool_is_a_failed_call_and_the_model_recovers(
    server: Server, mcp_http_server: HttpMcpServer
) -> None:
    events = raw_events(server, body("mcp fail now", web(mcp_http_server)))
    assert collapsed(events) == [
        "created",
        "in_progress",
        *LISTING,
        *CALL,
        "mcp_call.failed",
        "output_item.done",
        *MESSAGE,
        "completed",
    ]
    _, call, message = done_items(events)
    assert call["status"] == "failed"
    assert call["error"]["type"] == "mcp_tool_execution_error"
    assert "tool failed on purpose: disk full" in json.dumps(call["error"])
    assert message["content"][0]["text"] == "The tool failed (disk full), so I answer without it."
    assert events[-1]["response"]["status"] == "completed"


def test_allowed_tools_limits_the_listing_and_the_calls(
    server: Server, mcp_http_server: HttpMcpServer
) -> None:
    events = raw_events(server, body("mcp allowed?", web(mcp_http_server, allowed_tools=["web_add"])))
    listing, call, message = done_items(events)
    assert [t["name"] for t in listing["tools"]] == ["web_add"]
    assert (call["name"], call["status"]) == ("web_echo", "failed")  # not offered: the model is told
    assert message["content"][0]["text"] == "That tool is not available to me."


def test_approval_then_approved_call_in_the_next_request(
    client: openai.OpenAI, server: Server, mcp_http_server: HttpMcpServer
) -> None:
    tool = web(mcp_http_server, require_approval="always")
    first = raw_events(server, body("mcp approve 1 + 2", tool))
    assert collapsed(first) == [
        "created",
        "in_progress",
        *LISTING,
        "output_item.added",
        "output_item.done",
        "completed",
    ]
    request = done_items(first)[1]
    assert request == {
        "type": "mcp_approval_request",
        "id": request["id"],
        "server_label": "web",
        "name": "web_add",
        "arguments": request["arguments"],
    }
    assert json.loads(request["arguments"]) == {"a": 1, "b": 2}
    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    second = raw_events(
        server,
        {**body("", tool), "input": [answer], "previous_response_id": first[-1]["response"]["id"]},
    )
    # The approved call runs first; the listing is already in the conversation, so not again.
    assert collapsed(second) == [
        "created",
        "in_progress",
        *CALL,
        "mcp_call.completed",
        "output_item.done",
        *MESSAGE,
        "completed",
    ]
    call, message = done_items(second)
    assert (call["name"], call["output"], call["approval_request_id"]) == ("web_add", "3", request["id"])
    assert message["content"][0]["text"] == "1 + 2 = 3, computed by the approved tool."
    # The SDK sees the same thing, and a denial is told to the model.
    again = client.responses.create(model=MODEL, input="mcp approve 1 + 2", tools=[tool])  # type: ignore[list-item]
    asked = again.output[-1]
    assert asked.type == "mcp_approval_request"
    denied = client.responses.create(
        model=MODEL,
        previous_response_id=again.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": False}],
        tools=[tool],  # type: ignore[list-item]
    )
    assert [item.type for item in denied.output] == ["message"]
    assert denied.output_text == "Understood, I did not run it."


def test_an_approval_for_an_unknown_request_is_a_400(server: Server, mcp_http_server: HttpMcpServer) -> None:
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}
    response = httpx.post(
        f"{server.api_url}/responses",
        json={"model": MODEL, "input": [answer], "tools": [web(mcp_http_server)]},
        timeout=30,
    )
    assert_openai_error(
        response,
        400,
        param="input[0].approval_request_id",
        type="invalid_request_error",
        code="approval_request_not_found",
    )


def test_a_server_url_refused_by_the_ssrf_guard_is_a_400(server: Server) -> None:
    tool = {"type": "mcp", "server_label": "meta", "server_url": "http://169.254.169.254/mcp"}
    response = httpx.post(
        f"{server.api_url}/responses", json={"model": MODEL, "input": "hi", "tools": [tool]}, timeout=30
    )
    error = assert_openai_error(response, 400, param="tools", type="invalid_request_error")
    assert error["code"] == "server_url_refused"


def test_cancelling_a_background_response_while_a_tool_runs(
    server: Server, mcp_http_server: HttpMcpServer
) -> None:
    payload = {**body("mcp slow", web(mcp_http_server)), "stream": False, "background": True}
    started = httpx.post(f"{server.api_url}/responses", json=payload, timeout=30).json()
    url = f"{server.api_url}/responses/{started['id']}"

    def running_call() -> Json | None:
        output = httpx.get(url, timeout=10).json()["output"]
        return next((i for i in output if i["type"] == "mcp_call"), None)

    call = poll(running_call)
    assert (call["name"], call["status"], call["output"]) == ("web_slow", "in_progress", None)
    cancelled = httpx.post(f"{url}/cancel", timeout=30).json()
    assert cancelled["status"] == "cancelled"
    assert [(i["type"], i["status"]) for i in cancelled["output"] if i["type"] == "mcp_call"] == [
        ("mcp_call", "incomplete")
    ]
    assert httpx.get(url, timeout=10).json()["output"] == cancelled["output"]


def test_configured_servers_are_offered_without_being_named(server: Server) -> None:
    events = raw_events(server, body("mcp calc: 2 + 3"))
    call, message = done_items(events)  # no listing: the request names no server
    assert (call["type"], call["server_label"], call["name"], call["output"]) == (
        "mcp_call",
        "calc",
        "add",
        "5",
    )
    assert message["content"][0]["text"] == "The configured calculator says 5."


def test_a_configured_server_named_by_label_gets_its_allowed_tools(server: Server) -> None:
    calc = {"type": "mcp", "server_label": "calc", "allowed_tools": ["add"], "require_approval": "never"}
    listing, call, _ = done_items(raw_events(server, body("mcp calc: 2 + 3", calc)))
    assert (listing["server_label"], [t["name"] for t in listing["tools"]]) == ("calc", ["add"])
    assert (call["server_label"], call["status"]) == ("calc", "completed")
    unknown = {"type": "mcp", "server_label": "nowhere"}
    response = httpx.post(
        f"{server.api_url}/responses", json={"model": MODEL, "input": "hi", "tools": [unknown]}, timeout=30
    )
    assert_openai_error(response, 400, param="tools", code="plugin_not_found")


def test_the_round_limit_ends_the_response_saying_why(server: Server, mcp_http_server: HttpMcpServer) -> None:
    events = raw_events(server, body("mcp loop forever", web(mcp_http_server)))
    calls = [i for i in done_items(events) if i["type"] == "mcp_call"]
    assert [(c["name"], c["output"], c["status"]) for c in calls] == [
        ("web_echo", "again", "completed")
    ] * ROUNDS
    final = events[-1]
    assert final["type"] == "response.failed"
    assert f"Stopped after {ROUNDS} tool rounds" in final["response"]["error"]["message"]
    assert final["response"]["output"][1:] == calls
