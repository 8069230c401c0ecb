"""Every route the app serves, enumerated from the app itself (a route added later is attacked
without anyone listing it here), and the Responses WebSocket transport: malformed, oversized,
binary, unknown-type and deeply nested messages, and floods. The invariants: no 5xx, ever; an
error is in the error shape of the route's API (a WebSocket error is the spec's envelope); the
server is healthy afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream
from fuzz_support import (
    API_KEY,
    CONTENT_TYPES,
    Server,
    anthropic_bodies,
    chat_bodies,
    check_answer,
    completions_bodies,
    deep,
    dumps,
    embeddings_bodies,
    generic_bodies,
    infill_bodies,
    lmstudio_bodies,
    models_api_bodies,
    mutated,
    poll,
    responses_bodies,
    run_server,
    scripted,
    upstream_model,
    write_config,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route, WebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.e2e

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "120")) // 3,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_BODY = 256 * 1024
# The bodies each POST route is attacked with; a route missing here gets every dialect's.
BODIES = {
    "/v1/chat/completions": chat_bodies(),
    "/v1/chat/completions/input_tokens": chat_bodies(),
    "/chat/completions/input_tokens": chat_bodies(),
    "/v1/completions": completions_bodies(),
    "/infill": infill_bodies(),
    "/v1/responses": responses_bodies(),
    "/v1/responses/compact": responses_bodies(),
    "/api/v1/chat": lmstudio_bodies(),
    "/v1/messages": anthropic_bodies(),
    "/v1/messages/count_tokens": anthropic_bodies(),
    "/v1/embeddings": embeddings_bodies(),
    "/api/v0/embeddings": embeddings_bodies(),
    "/api/v1/models/load": models_api_bodies(),
    "/api/v1/models/unload": models_api_bodies(),
    "/api/v1/models/download": models_api_bodies(),
    "/api/v1/models/download/cancel": models_api_bodies(),
}
PARAMS = ["resp_missing", "", "%00", "%FF", "é", "..", "chat", "up", "job_x", "%2F", "a%20b", "x" * 300]
STORED: list[str] = []


def app_routes(config: Path, folder: Path) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(path template, methods) of every HTTP route and the paths of every WebSocket route,
    read from an app built from the fuzz server's own config."""
    from sluicegate.app.factory import create_app
    from sluicegate.config import load_settings

    settings_ = load_settings(config, env={})
    settings_.data_dir = folder / "enumerate"
    app = create_app(settings_)
    http_routes, sockets = [], []
    for route in app.routes:
        if isinstance(route, WebSocketRoute):
            sockets.append(route.path)
        elif isinstance(route, Route):
            http_routes.append((route.path, sorted(route.methods or {"GET"})))
    return http_routes, sockets


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, list[tuple[str, list[str]]], list[str]]]:
    folder = tmp_path_factory.mktemp("fuzz-routes")
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(FakeUpstream(name="fuzz-routes"))
        config = write_config(
            folder,
            {"api_keys": [API_KEY], "max_json_depth": 64, "max_instances": 3, "max_body_bytes": MAX_BODY},
            [
                scripted("chat", "chat.yaml"),
                upstream_model("up", upstream),
                scripted("loadable", "chat.yaml"),
            ],
        )
        routes, sockets = app_routes(config, folder)
        env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1"}
        server = stack.enter_context(run_server(folder, config, env=env))
        created = httpx.post(
            server.base_url + "/v1/responses", json={"model": "chat", "input": "hi"}, headers=AUTH, timeout=30
        )
        STORED.append(created.json()["id"])
        yield server, routes, sockets


def test_the_enumeration_sees_the_routes_the_issue_names(world: Any) -> None:
    _, routes, sockets = world
    paths = {path for path, _ in routes}
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/responses/compact"):
        assert path in paths
    assert "/v1/responses" in sockets


def _fill(template: str, ident: str) -> str:
    if ident == "<stored>":
        ident = STORED[0]
    quoted = ident if ident in PARAMS else urllib.parse.quote(ident, safe="")
    return re.sub(r"\{[^}]+\}", lambda _: quoted, template)


def _attack_route(http: httpx.Client, template: str, methods: list[str]) -> None:
    bodies = BODIES.get(template, generic_bodies())

    @FUZZ
    @given(
        method=st.sampled_from([*methods, *methods, "PUT", "PATCH", "DELETE"]),
        ident=st.one_of(st.sampled_from(["<stored>", *PARAMS]), st.text(max_size=12)),
        body=st.one_of(mutated(bodies), st.none(), st.binary(max_size=64)),
        content_type=st.sampled_from(CONTENT_TYPES),
    )
    def attack(method: str, ident: str, body: bytes | None, content_type: str | None) -> None:
        if method == "DELETE" and ident == "<stored>":
            ident = "resp_missing"  # keep the stored one for the other examples
        path = _fill(template, ident)
        headers = dict(AUTH)
        if content_type is not None and body is not None:
            headers["content-type"] = content_type
        response = http.request(method, path, content=body if method != "GET" else None, headers=headers)
        if method == "HEAD":
            assert response.status_code < 500, (method, path)
        else:
            check_answer(method, path.split("?")[0], response)

    attack()


def test_every_route_with_every_method_and_mutated_bodies(world: Any) -> None:
    server, routes, _ = world
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        for template, methods in routes:
            _attack_route(http, template, methods)


# --- the WebSocket transport --------------------------------------------------------------------


def ws_url(server: Server, path: str) -> str:
    return server.base_url.replace("http://", "ws://") + path


def open_socket(server: Server, path: str) -> ClientConnection:
    return connect(ws_url(server, path), additional_headers=AUTH, max_size=None, open_timeout=30)


TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


def check_turn(ws: ClientConnection) -> str:
    """Read one turn's messages to its end; each is a valid event or the spec's error envelope,
    never a 5xx. Returns how it ended ("error", a terminal type, or "closed")."""
    while True:
        try:
            text = ws.recv(timeout=60)
        except ConnectionClosed as closed:
            assert closed.rcvd is None or closed.rcvd.code in (1000, 1008, 1009), closed
            return "closed"
        event = json.loads(text)
        kind = event.get("type")
        if kind == "error":
            assert set(event) == {"type", "status", "error"}, event
            assert 400 <= event["status"] < 500, event
            assert set(event["error"]) == {"type", "code", "message", "param"}, event
            assert isinstance(event["error"]["code"], str) and event["error"]["message"], event
            return "error"
        if kind in TERMINAL:
            return str(kind)


def _message(body: bytes) -> bytes:
    """A mutated create body as a `response.create` message (when it is still an object)."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if isinstance(value, dict):
        value.pop("background", None)
        return json.dumps({"type": "response.create", **value}).encode()
    return body


def _attack_socket(server: Server, path: str) -> None:
    state = {"ws": open_socket(server, path)}

    @FUZZ
    @given(body=mutated(responses_bodies()), as_binary=st.booleans())
    def attack(body: bytes, as_binary: bool) -> None:
        message = _message(body)
        sock = state["ws"]
        try:
            sock.send(message if as_binary else message.decode("utf-8", "replace"))
        except ConnectionClosed:
            state["ws"] = open_socket(server, path)
            return
        if check_turn(sock) == "closed":
            state["ws"] = open_socket(server, path)

    try:
        attack()
    finally:
        state["ws"].close()


def test_websocket_mutated_messages(world: Any) -> None:
    server, _, sockets = world
    for path in sockets:
        _attack_socket(server, path)


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"[]",
        b'"response.create"',
        b'{"type": "response.cancel"}',
        b'{"type": "\xf0\x9f\x99\x82", "model": "chat"}',
        b'{"type": "response.create"}',
        b'{"type": "response.create", "model": "chat", "input": "hi", "background": true}',
        dumps(deep(300)),
        b'{"type": "response.create", "model": "chat", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": '
        + deep(300).data
        + b"}]}",
        b'{"type": "response.create", "model": "chat", "input": [{"type": "function_call_output", "call_id": "c", "output": '
        + deep(300).data
        + b"}]}",
        b'{"type": "response.create", "model": "chat", "input": "' + b"x" * (MAX_BODY + 10) + b'"}',
    ],
    ids=lambda m: repr(m[:40]),
)
@pytest.mark.parametrize("binary", [False, True])
def test_websocket_hostile_messages(world: Any, message: bytes, binary: bool) -> None:
    server, _, sockets = world
    for path in sockets:
        with open_socket(server, path) as ws:
            ws.send(message if binary else message.decode("utf-8", "replace"))
            assert check_turn(ws) == "error"
            ws.send(json.dumps({"type": "response.create", "model": "chat", "input": "hi"}))
            assert check_turn(ws) == "response.completed"  # the connection goes on


def test_websocket_text_that_is_not_utf8(world: Any) -> None:
    """Closed with 1007 and one log line (issue 47: uvicorn's websockets-sansio logged a
    traceback for each such message, a log a hostile client could fill)."""
    server, _, sockets = world
    for path in sockets:
        before = server.output().count("not UTF-8")
        with open_socket(server, path) as ws:
            ws.send(b'{"type": "response.create", "model": "chat", "input": "\xff\xfe"}', text=True)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
        poll(lambda: server.output().count("not UTF-8") > before, 30, fail=True)  # noqa: B023
        assert server.output().count("not UTF-8") == before + 1
    assert "Traceback" not in server.output()


def test_websocket_flood(world: Any) -> None:
    """200 messages without reading: the server closes the connection (1008), answers what it
    ran, and never with a 5xx; the next connection is served."""
    server, _, sockets = world
    for path in sockets:
        with open_socket(server, path) as ws:
            turn = json.dumps({"type": "response.create", "model": "chat", "input": "hi"})
            with contextlib.suppress(ConnectionClosed):
                for _ in range(200):
                    ws.send(turn)
            ended = ""
            while ended != "closed":
                ended = check_turn(ws)
        with open_socket(server, path) as ws:
            ws.send(json.dumps({"type": "response.create", "model": "chat", "input": "hi"}))
            assert check_turn(ws) == "response.completed"


def test_zz_healthy_afterwards(world: Any) -> None:
    server, _, _ = world
    assert httpx.get(server.base_url + "/health", timeout=30).status_code == 200
    assert "Traceback" not in server.output()
