"""Bad Responses requests get OpenAI's error shape and the right status, and leave nothing behind."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from responses_support import HELLO, TOOL_ANSWER, Server, assert_openai_error, running_server

pytestmark = pytest.mark.e2e

MODEL = "scripted"
MISSING = "missing_required_parameter"
FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}

# name → (body without "model", status, param, code, words the message must contain)
BAD: dict[str, tuple[dict[str, Any], int, str | None, str | None, list[str]]] = {
    "unknown_item_type": ({"input": [{"type": "bogus_item"}]}, 400, "input[0].type", None, ["bogus_item"]),
    "item_without_type_or_role": ({"input": [{"content": "hi"}]}, 400, "input[0].type", MISSING, []),
    "function_call_output_without_call_id": (
        {"input": [{"type": "function_call_output", "output": "42"}]},
        400,
        "input[0].call_id",
        MISSING,
        ["call_id"],
    ),
    "function_call_output_without_output": (
        {"input": [{"type": "function_call_output", "call_id": "call_1"}]},
        400,
        "input[0].output",
        MISSING,
        [],
    ),
    "function_call_without_name": (
        {"input": [{"type": "function_call", "call_id": "call_1", "arguments": "{}"}]},
        400,
        "input[0].name",
        MISSING,
        [],
    ),
    "unknown_previous_response_id": (
        {"input": "hi", "previous_response_id": "resp_never_existed"},
        404,
        "previous_response_id",
        "not_found",
        ["resp_never_existed"],
    ),
    "unknown_previous_response_with_tool_result": (
        {
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "42"}],
            "previous_response_id": "resp_gone_too",
        },
        404,
        "previous_response_id",
        "not_found",
        ["resp_gone_too"],
    ),
    "unknown_item_reference": (
        {"input": [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_nowhere"}]},
        404,
        "input[1].id",
        "not_found",
        ["msg_nowhere"],
    ),
    "temperature_string": ({"input": "hi", "temperature": "hot"}, 400, "temperature", None, ["number"]),
    "temperature_out_of_range": ({"input": "hi", "temperature": 3}, 400, "temperature", None, []),
    "top_p_null_is_fine_but_list_is_not": ({"input": "hi", "top_p": [1]}, 400, "top_p", None, []),
    "input_number": ({"input": 42}, 400, "input", None, []),
    "input_empty_list": ({"input": []}, 400, "input", None, []),
    "input_missing": ({}, 400, "input", MISSING, ["input"]),
    "tools_not_array": ({"input": "hi", "tools": {"type": "function"}}, 400, "tools", None, ["array"]),
    "tool_without_name": (
        {"input": "hi", "tools": [{"type": "function"}]},
        400,
        "tools[0].name",
        MISSING,
        [],
    ),
    "tool_of_unknown_type": (  # a hosted tool such as web_search is accepted; a non-string type is not
        {"input": "hi", "tools": [{"type": 3}]},
        400,
        "tools[0].type",
        None,
        [],
    ),
    "mcp_tool_while_request_servers_are_off": (
        {"input": "hi", "tools": [{"type": "mcp", "server_label": "x", "server_url": "http://localhost:1"}]},
        400,
        "tools",
        "request_servers_disabled",
        ["allow_request_servers"],
    ),
    "mcp_tool_without_a_label": (
        {"input": "hi", "tools": [{"type": "mcp", "server_url": "http://localhost:1"}]},
        400,
        "tools[0].server_label",
        "missing_required_parameter",
        [],
    ),
    "tool_choice_names_a_missing_tool": (
        {"input": "hi", "tools": [FUNCTION], "tool_choice": {"type": "function", "name": "nope"}},
        400,
        "tool_choice.name",
        None,
        ["nope"],
    ),
    "store_not_boolean": ({"input": "hi", "store": "yes"}, 400, "store", None, ["boolean"]),
    "stream_not_boolean": ({"input": "hi", "stream": 1}, 400, "stream", None, []),
    "background_without_store": (
        {"input": "hi", "background": True, "store": False},
        400,
        "background",
        None,
        [],
    ),
    "unknown_role": ({"input": [{"role": "robot", "content": "hi"}]}, 400, "input[0].role", None, ["robot"]),
    "unknown_content_part": (
        {"input": [{"role": "user", "content": [{"type": "input_hologram"}]}]},
        400,
        "input[0].content[0].type",
        None,
        [],
    ),
    "metadata_value_not_string": ({"input": "hi", "metadata": {"n": 1}}, 400, "metadata.n", None, []),
    "max_output_tokens_zero": ({"input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens", None, []),
    "reasoning_effort_unknown": (
        {"input": "hi", "reasoning": {"effort": "extreme"}},
        400,
        "reasoning.effort",
        None,
        [],
    ),
    "conversation_unsupported": ({"input": "hi", "conversation": "conv_1"}, 400, "conversation", None, []),
    "stream_options_without_stream": (
        {"input": "hi", "stream_options": {"include_obfuscation": False}},
        400,
        "stream_options",
        None,
        [],
    ),
}


@pytest.fixture(scope="module")
def bad_input_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("responses-bad-input"), models={MODEL: "responses.yaml"}
    ) as s:
        yield s


@pytest.fixture
def http(bad_input_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=bad_input_server.base_url, timeout=30.0) as client:
        yield client


def stored_count(server: Server) -> int:
    if not server.store_file.exists():
        return 0
    with sqlite3.connect(f"file:{server.store_file}?mode=ro", uri=True) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM responses").fetchone()
        (items,) = db.execute("SELECT COUNT(*) FROM items").fetchone()
    return int(count) * 1_000_000 + int(items)


# Every case also as a streaming request (a JSON error, never an event stream), except those
# about the stream parameters themselves.
STREAMING = [case for case, (body, *_) in BAD.items() if not {"stream", "stream_options"} & set(body)]


@pytest.mark.parametrize(
    ("case", "stream"),
    [(case, False) for case in BAD] + [(case, True) for case in STREAMING],
    ids=[*BAD, *(f"{case}-stream" for case in STREAMING)],
)
def test_bad_request_gets_an_openai_error(
    bad_input_server: Server, http: httpx.Client, case: str, stream: bool
) -> None:
    body, status, param, code, needles = BAD[case]
    before = stored_count(bad_input_server)
    reply = http.post("/v1/responses", json={"model": MODEL, **body, **({"stream": True} if stream else {})})
    error = assert_openai_error(reply, status, param=param, code=code)
    assert error["type"] == "invalid_request_error"
    for needle in needles:
        assert needle in error["message"], error
    assert stored_count(bad_input_server) == before  # nothing half-stored


@pytest.mark.parametrize(
    ("raw", "why"),
    [(b"{not json", "JSON"), (b"", "empty"), (b"[1, 2]", "object")],
    ids=["malformed", "empty", "array"],
)
def test_unreadable_bodies(http: httpx.Client, raw: bytes, why: str) -> None:
    reply = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    error = assert_openai_error(reply, 400, param=None, code=None)
    assert why in error["message"]


def test_missing_model_and_unknown_model(http: httpx.Client) -> None:
    assert_openai_error(http.post("/v1/responses", json={"input": "hi"}), 400, param="model", code=MISSING)
    reply = http.post("/v1/responses", json={"model": "nope", "input": "hi"})
    error = assert_openai_error(reply, 404, param="model", code="model_not_found")
    assert "nope" in error["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/responses/resp_unknown"),
        ("DELETE", "/v1/responses/resp_unknown"),
        ("POST", "/v1/responses/resp_unknown/cancel"),
        ("GET", "/v1/responses/resp_unknown/input_items"),
    ],
)
def test_unknown_response_ids_are_404(http: httpx.Client, method: str, path: str) -> None:
    error = assert_openai_error(http.request(method, path), 404, param="response_id", code="not_found")
    assert "resp_unknown" in error["message"]


def test_bad_input_items_queries(http: httpx.Client) -> None:
    created = http.post("/v1/responses", json={"model": MODEL, "input": "hi"}).json()
    path = f"/v1/responses/{created['id']}/input_items"
    assert_openai_error(http.get(path, params={"order": "sideways"}), 400, param="order", code=None)
    assert_openai_error(http.get(path, params={"limit": "0"}), 400, param="limit", code=None)
    assert_openai_error(http.get(path, params={"limit": "many"}), 400, param="limit", code=None)
    assert_openai_error(http.get(path, params={"after": "msg_nope"}), 404, param="after", code="not_found")


def test_the_store_still_works_after_bad_requests(bad_input_server: Server, http: httpx.Client) -> None:
    for body, *_ in BAD.values():
        http.post("/v1/responses", json={"model": MODEL, **body})
    assert_openai_error(
        http.get("/v1/responses/resp_never_existed"), 404, param="response_id", code="not_found"
    )
    before = stored_count(bad_input_server)

    first = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [FUNCTION]})
    assert first.status_code == 200 and first.json()["output"][0]["content"][0]["text"] == HELLO
    message_id = first.json()["output"][0]["id"]
    follow = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "previous_response_id": first.json()["id"],
            "input": [
                {"type": "item_reference", "id": message_id},  # a stored item can be referred to
                {"type": "function_call_output", "call_id": "call_client", "output": "ok"},
            ],
        },
    )
    assert follow.status_code == 200, follow.text
    assert follow.json()["output"][0]["content"][0]["text"] == TOOL_ANSWER
    assert http.get(f"/v1/responses/{follow.json()['id']}").json() == follow.json()
    assert stored_count(bad_input_server) > before
