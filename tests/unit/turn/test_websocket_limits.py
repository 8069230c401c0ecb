"""Every limit applied to HTTP bodies applies to WebSocket messages: size, JSON depth, bad
UTF-8. A message nested past `max_json_depth` once reached the encoder and came back as
`{"type": "error", "status": 500}` from a RecursionError; over HTTP the same body is a 400."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from scripted_app import scripted_client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with scripted_client(tmp_path) as test_client:
        yield test_client


def _nested(depth: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


DEEP_TOOL = {
    "type": "response.create",
    "model": "m",
    "input": "hi",
    "tools": [{"type": "function", "name": "f", "parameters": _nested(300)}],
}
DEEP_OUTPUT = {
    "type": "response.create",
    "model": "m",
    "input": [{"type": "function_call_output", "call_id": "c", "output": _nested(300)}],
}


def _deep_bytes(message: dict[str, Any]) -> bytes:
    # orjson refuses to write 300 levels: the client's JSON, as a hostile client writes it.
    import json

    return json.dumps(message).encode()


@pytest.mark.parametrize("message", [DEEP_TOOL, DEEP_OUTPUT], ids=["tool-parameters", "function-call-output"])
def test_a_message_nested_too_deep_is_the_same_400_as_over_http(client: TestClient, message: Any) -> None:
    data = _deep_bytes(message)
    over_http = client.post(
        "/v1/responses",
        content=data.replace(b'"type": "response.create", ', b""),
        headers={"content-type": "application/json"},
    )
    assert over_http.status_code == 400
    with client.websocket_connect("/v1/responses") as ws:
        ws.send_text(data.decode())
        envelope = orjson.loads(ws.receive_text())
        assert envelope["type"] == "error" and envelope["status"] == 400, envelope
        assert envelope["error"]["code"] == over_http.json()["error"]["code"] == "json_too_deep"
        # The connection goes on.
        ws.send_text(orjson.dumps({"type": "response.create", "model": "m", "input": "hi"}).decode())
        while (event := orjson.loads(ws.receive_text()))["type"] != "response.completed":
            assert event["type"] != "error", event


def test_a_binary_message_that_is_not_utf8_is_a_400(client: TestClient) -> None:
    with client.websocket_connect("/v1/responses") as ws:
        ws.send_bytes(b'{"type": "response.create", "model": "m", "input": "\xff\xfe"}')
        envelope = orjson.loads(ws.receive_text())
        assert envelope["type"] == "error" and envelope["status"] == 400, envelope
