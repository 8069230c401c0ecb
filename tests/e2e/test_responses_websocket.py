"""The Responses API over a WebSocket (`ws://…/v1/responses`), with a real WebSocket client
(`websockets`) against a real server process: the same events as SSE, one response at a time,
connection-local `store: false` continuation and its eviction, `previous_response_not_found`,
the connection limit, API keys on the handshake, and a client that leaves mid-turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import read_metrics
from responses_support import Server, poll, running_server, stream_raw
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.e2e

MODEL = "scripted"
HOLD = "hold"  # a token a second: a turn that is still running when the client leaves
KEY = "sk-ws"
TERMINAL = {"response.completed", "response.failed", "response.incomplete"}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("ws"),
        responses={"websocket_cached_responses": 2},
        models={MODEL: "websocket.yaml", HOLD: "hold.yaml"},
    ) as s:
        yield s


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("ws-keyed"), server={"api_keys": [KEY]}, models={MODEL: "websocket.yaml"}
    ) as s:
        yield s


@pytest.fixture
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Connections limited to a second (the spec's limit is 60 minutes)."""
    with running_server(
        tmp_path_factory.mktemp("ws-limited"),
        responses={"websocket_max_seconds": 1},
        models={MODEL: "websocket.yaml"},
    ) as s:
        yield s


def ws_url(server: Server) -> str:
    return server.base_url.replace("http://", "ws://", 1) + "/v1/responses"


def open_ws(server: Server, key: str | None = None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return connect(ws_url(server), additional_headers=headers, open_timeout=20, close_timeout=5)


def receive_turn(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every event of one turn, up to its terminal `response.*` event or an `error`."""
    events: list[dict[str, Any]] = []
    while True:
        message = ws.recv(timeout=30)
        assert isinstance(message, str), "events are text messages"
        event = json.loads(message)
        events.append(event)
        if event["type"] in TERMINAL or event["type"] == "error":
            return events


def turn(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
    return receive_turn(ws)


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] in TERMINAL, events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def error_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn's `error` envelope, checked against the spec's shape."""
    assert len(events) == 1, events
    envelope = events[0]
    assert envelope["type"] == "error", envelope
    assert isinstance(envelope["status"], int)
    error: dict[str, Any] = envelope["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    return {"status": envelope["status"], **error}


def text_of(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def test_a_turn_sends_the_sse_events_one_message_each(server: Server) -> None:
    body = {"model": MODEL, "store": False, "input": "Say hello."}
    sse = stream_raw(server.base_url, {**body, "stream": True})
    sse_events = [f.json() for f in sse.frames if f.data is not None and not f.is_done]
    with open_ws(server) as ws:
        events = turn(ws, **{k: v for k, v in body.items() if k != "model"})
    assert [e["type"] for e in events] == [e["type"] for e in sse_events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert final(events)["status"] == "completed"
    assert text_of(final(events)) == "Hello there, friend."


def test_turns_on_one_connection_run_one_after_another(server: Server) -> None:
    with open_ws(server) as ws:
        # Both sent at once: the second waits for the first to end, its events never interleave.
        for content in ("Say hello.", "What is the code word?"):
            ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False, "input": content}))
        first, second = receive_turn(ws), receive_turn(ws)
    assert text_of(final(first)) == "Hello there, friend."
    assert text_of(final(second)) == "cobalt"
    assert final(first)["id"] != final(second)["id"]
    for events in (first, second):
        assert events[0]["type"] == "response.created"
        assert {e["response"]["id"] for e in events if "response" in e} == {final(events)["id"]}


def test_store_false_continues_from_the_connection_like_a_stored_chain_over_http(server: Server) -> None:
    """A store:false chain on one socket resolves exactly the conversation the same chain gets
    over HTTP with store:true (the scripted prompt cost counts every message), and a tool call
    made in the first turn is answered in the second."""
    first_input = "What is the weather in Paris?"
    with open_ws(server) as ws:
        first = final(turn(ws, store=False, input=first_input, tools=[WEATHER_TOOL]))
        call = next(i for i in first["output"] if i["type"] == "function_call")
        output = [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"}]
        second = final(
            turn(ws, store=False, previous_response_id=first["id"], input=output, tools=[WEATHER_TOOL])
        )
    assert second["status"] == "completed", second
    assert second["previous_response_id"] == first["id"]
    assert text_of(second) == "It is sunny in Paris."
    assert httpx.get(f"{server.base_url}/v1/responses/{first['id']}").status_code == 404  # never stored

    http_first = httpx.post(
        f"{server.base_url}/v1/responses",
        json={"model": MODEL, "input": first_input, "tools": [WEATHER_TOOL]},
    ).json()
    http_call = next(i for i in http_first["output"] if i["type"] == "function_call")
    http_second = httpx.post(
        f"{server.base_url}/v1/responses",
        json={
            "model": MODEL,
            "previous_response_id": http_first["id"],
            "input": [{**output[0], "call_id": http_call["call_id"]}],
            "tools": [WEATHER_TOOL],
        },
    ).json()
    assert second["usage"]["input_tokens"] == http_second["usage"]["input_tokens"]
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]


def test_an_id_the_connection_never_saw_is_previous_response_not_found(server: Server) -> None:
    with open_ws(server) as ws:
        first = final(turn(ws, store=False, input="Say hello."))
    with open_ws(server) as ws:  # a new connection: store:false state died with the old one
        error = error_of(turn(ws, store=False, previous_response_id=first["id"], input="Again."))
        assert (error["status"], error["code"], error["param"]) == (
            400,
            "previous_response_not_found",
            "previous_response_id",
        )
        assert first["id"] in error["message"]
        # The connection stays open: a fresh chain works at once.
        assert final(turn(ws, store=False, input="Say hello."))["status"] == "completed"
        error = error_of(turn(ws, store=False, previous_response_id="resp_never_made", input="Again."))
        assert error["code"] == "previous_response_not_found"


def test_a_stored_response_continues_on_any_connection(server: Server) -> None:
    with open_ws(server) as ws:
        first = final(turn(ws, store=True, input="What is the code word?"))
    assert httpx.get(f"{server.base_url}/v1/responses/{first['id']}").json()["status"] == "completed"
    with open_ws(server) as ws:
        second = final(turn(ws, store=False, previous_response_id=first["id"], input="Say it again."))
    assert second["status"] == "completed"
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]


def test_a_failed_continuation_evicts_what_it_continued(server: Server) -> None:
    with open_ws(server) as ws:
        first = final(turn(ws, store=False, input="What is the code word?"))
        # A result for a call the previous response never made: an error, not a synthesised call.
        orphan = [{"type": "function_call_output", "call_id": "call_nowhere", "output": "?"}]
        error = error_of(turn(ws, store=False, previous_response_id=first["id"], input=orphan))
        assert error["status"] == 400 and "call_nowhere" in error["message"], error
        retry = error_of(turn(ws, store=False, previous_response_id=first["id"], input="Try again."))
        assert retry["code"] == "previous_response_not_found"


def test_a_continuation_that_works_keeps_the_chain(server: Server) -> None:
    """The control for eviction: without a failure the same id continues twice."""
    with open_ws(server) as ws:
        first = final(turn(ws, store=False, input="What is the code word?"))
        for _ in range(2):
            again = final(turn(ws, store=False, previous_response_id=first["id"], input="Once more."))
            assert again["status"] == "completed"


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ("{not json", None),
        ('["response.create"]', None),
        ('{"type": "response.cancel"}', "type"),
        (
            json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "background": True}),
            "background",
        ),
        (
            json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "temperature": "hot"}),
            "temperature",
        ),
        (json.dumps({"type": "response.create", "model": "no-such-model", "input": "hi"}), None),
    ],
)
def test_bad_messages_get_an_error_envelope_and_the_connection_stays(
    server: Server, message: str, param: str | None
) -> None:
    with open_ws(server) as ws:
        ws.send(message)
        error = error_of(receive_turn(ws))
        assert error["status"] in (400, 404), error
        if param is not None:
            assert error["param"] == param, error
        assert final(turn(ws, store=False, input="Say hello."))["status"] == "completed"


def test_stream_fields_are_ignored_over_websocket(server: Server) -> None:
    with open_ws(server) as ws:
        events = turn(
            ws, store=False, input="Say hello.", stream=False, stream_options={"include_obfuscation": False}
        )
    assert final(events)["status"] == "completed"


def test_the_handshake_checks_api_keys_as_http_does(keyed: Server) -> None:
    """`app/auth.py` checks the key before routing: a handshake without the right one is closed
    before it opens (1008, which the server answers as HTTP 403)."""
    for key in (None, "sk-wrong"):
        with pytest.raises(InvalidStatus) as refused:
            open_ws(keyed, key).close()
        assert refused.value.response.status_code == 403
    with open_ws(keyed, KEY) as ws:
        assert final(turn(ws, store=False, input="Say hello."))["status"] == "completed"


def test_the_connection_ends_at_its_limit_with_websocket_connection_limit_reached(limited: Server) -> None:
    with open_ws(limited) as ws:
        error = error_of(receive_turn(ws))  # nothing sent: the limit ends the connection
        assert error["code"] == "websocket_connection_limit_reached", error
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
        assert ws.close_code == 1000


def test_only_the_most_recent_responses_are_kept(server: Server) -> None:
    """The connection keeps its last two responses here (`websocket_cached_responses`)."""
    with open_ws(server) as ws:
        ids = [final(turn(ws, store=False, input="Say hello."))["id"] for _ in range(3)]
        assert (
            final(turn(ws, store=False, previous_response_id=ids[2], input="Go on."))["status"] == "completed"
        )
        error = error_of(turn(ws, store=False, previous_response_id=ids[0], input="Go on."))
        assert error["code"] == "previous_response_not_found"


def in_flight(server: Server) -> float:
    """Admitted requests plus running generations."""
    metrics = read_metrics(server.base_url)
    return sum(
        v
        for (name, _), v in metrics.items()
        if name in ("sluicegate_requests_in_flight", "sluicegate_generations_active")
    )


def test_a_client_that_leaves_mid_turn_leaves_nothing_in_flight(server: Server) -> None:
    ws = open_ws(server)
    try:
        ws.send(
            json.dumps({"type": "response.create", "model": HOLD, "store": False, "input": "Talk slowly."})
        )
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
        assert in_flight(server) >= 2  # the turn holds its admission place and its generation now
    finally:
        ws.close()
    poll(lambda: in_flight(server) == 0, timeout=30)


def test_a_stored_turn_is_live_while_it_streams(server: Server) -> None:
    """A store:true WebSocket turn is registered like an SSE one: retrievable while it runs, not
    continuable until it ends; a client that leaves gets what was generated stored."""
    ws = open_ws(server)
    try:
        ws.send(
            json.dumps({"type": "response.create", "model": HOLD, "store": True, "input": "Talk slowly."})
        )
        created = json.loads(ws.recv(timeout=30))
        assert created["type"] == "response.created"
        response_id = created["response"]["id"]
        live = httpx.get(f"{server.base_url}/v1/responses/{response_id}").json()
        assert live["status"] in ("queued", "in_progress"), live
        with open_ws(server) as other:
            error = error_of(turn(other, store=False, previous_response_id=response_id, input="Next."))
        assert error["code"] == "previous_response_in_progress", error
    finally:
        ws.close()

    def stored_status() -> str | None:
        answer = httpx.get(f"{server.base_url}/v1/responses/{response_id}")
        status = answer.json().get("status") if answer.status_code == 200 else None
        return status if status not in ("queued", "in_progress") else None

    assert poll(stored_status, timeout=30) != "completed"


def test_a_client_that_piles_up_messages_is_closed_not_buffered(server: Server) -> None:
    """Sixteen messages may wait for the turn in flight; the seventeenth closes the connection
    (1008) and cancels that turn."""
    with open_ws(server) as ws:
        create = json.dumps(
            {"type": "response.create", "model": HOLD, "store": False, "input": "Talk slowly."}
        )
        ws.send(create)
        assert json.loads(ws.recv(timeout=30))["type"] == "response.created"
        for _ in range(16):
            ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False, "input": "Hi."}))
        ws.send(create)
        with pytest.raises(ConnectionClosed):
            while True:
                ws.recv(timeout=30)
        assert ws.close_code == 1008
    poll(lambda: in_flight(server) == 0, timeout=30)


def test_the_openai_sdk_websocket_client_runs_a_store_false_chain(keyed: Server) -> None:
    """`client.responses.connect()` of the official SDK: typed events, a tool round trip on
    connection-local state, and `previous_response_not_found` as its typed error event."""
    client = openai.OpenAI(base_url=keyed.base_url + "/v1", api_key=KEY, max_retries=0)

    def until_end(connection: Any) -> list[Any]:
        events = []
        for event in connection:
            events.append(event)
            if event.type in TERMINAL or event.type == "error":
                return events
        raise AssertionError("the connection closed mid-turn")

    with client.responses.connect() as connection:
        connection.response.create(
            model=MODEL, input="What is the weather in Paris?", store=False, tools=[WEATHER_TOOL]
        )
        first = until_end(connection)[-1].response
        call = next(item for item in first.output if item.type == "function_call")
        connection.response.create(
            model=MODEL,
            store=False,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=[WEATHER_TOOL],
        )
        events = until_end(connection)
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "It is sunny in Paris."
        assert [e.sequence_number for e in events] == list(range(len(events)))
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, store=False, previous_response_id=first.id, input="Again.")
        (error,) = until_end(connection)
        assert error.type == "error"
        assert error.error.code == "previous_response_not_found"


def test_each_turn_is_observed_like_an_http_request(server: Server) -> None:
    """Time to first token and the request duration count every WebSocket turn, labelled with
    the Responses dialect and the model (`observe/requests.py`)."""

    def count(name: str, **labels: str) -> float:
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in httpx.get(server.base_url + "/metrics").text.splitlines():
            if line.startswith(f"{name}{{") and line.split("}")[0][len(name) + 1 :] == wanted:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    ttft = ("sluicegate_time_to_first_token_seconds_count", {"dialect": "responses", "model": MODEL})
    duration = (
        "sluicegate_request_duration_seconds_count",
        {"dialect": "responses", "model": MODEL, "status": "200"},
    )
    before = count(ttft[0], **ttft[1]), count(duration[0], **duration[1])
    with open_ws(server) as ws:
        for _ in range(2):
            assert final(turn(ws, store=False, input="Say hello."))["status"] == "completed"
    after = count(ttft[0], **ttft[1]), count(duration[0], **duration[1])
    assert (after[0] - before[0], after[1] - before[1]) == (2, 2)
