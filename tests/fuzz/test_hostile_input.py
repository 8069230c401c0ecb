"""Hostile input never gets a 500 (issue 14): one real `sluicegate serve` (a scripted model and an
`openai`-engine model on the fake upstream, API keys configured) attacked on every route and
method with bodies generated from each dialect's request schema and then mutated (wrong types,
numbers past 64 bits, NaN and Infinity, deep nesting, long strings, invalid UTF-8, duplicate
keys, wrong content types), odd query strings and ids, and unknown methods.

Invariants: no 5xx; every error is JSON in the error shape of the path's API; the server log
has no traceback; afterwards a normal request succeeds and nothing is left in flight. The
issue's own reproductions are plain regression tests below the property tests.

Hypothesis runs derandomized with bounded examples (120 per property), so the suite is the same
on every run and takes well under a minute; `FUZZ_EXAMPLES=2000 pytest tests/fuzz` searches
longer. Deterministic sweeps (every parameter x every value that once broke the server) sit
beside the random search, so the known failures are always covered.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream
from fuzz_support import (
    API_KEY,
    CONTENT_TYPES,
    Raw,
    Server,
    anthropic_bodies,
    chat_bodies,
    check_answer,
    completions_bodies,
    dead_url,
    deep,
    dumps,
    infill_bodies,
    lmstudio_bodies,
    metric_totals,
    models_api_bodies,
    mutated,
    ollama_bodies,
    ollama_models_bodies,
    responses_bodies,
    run_server,
    scripted,
    upstream_model,
    write_config,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate.app.auth import is_open_request

pytestmark = pytest.mark.e2e

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "120")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
AUTH = {"Authorization": f"Bearer {API_KEY}"}
BODY_ROUTES = [
    ("/v1/chat/completions", chat_bodies()),
    ("/v1/responses", responses_bodies()),
    ("/api/v1/chat", lmstudio_bodies()),
    ("/v1/messages", anthropic_bodies()),
    ("/v1/messages/count_tokens", anthropic_bodies()),
    ("/v1/completions", completions_bodies()),
    ("/infill", infill_bodies()),
    ("/api/v1/models/load", models_api_bodies()),
    ("/api/v1/models/unload", models_api_bodies()),
    ("/api/v1/models/download", models_api_bodies()),
    ("/api/chat", ollama_bodies()),
    ("/api/generate", ollama_bodies()),
    ("/api/show", ollama_models_bodies()),
    ("/api/pull", ollama_models_bodies()),
    ("/api/embed", ollama_models_bodies()),
    ("/api/embeddings", ollama_models_bodies()),
    ("/api/copy", ollama_models_bodies()),
]
ID_ROUTES = [  # and the query parameters each reads
    ("GET", "/v1/models/{id}", ()),
    ("GET", "/v1/responses/{id}", ("stream", "starting_after", "include")),
    ("DELETE", "/v1/responses/{id}", ()),
    ("POST", "/v1/responses/{id}/cancel", ()),
    ("GET", "/v1/responses/{id}/input_items", ("limit", "after", "order", "include")),
    ("GET", "/api/v1/models/download/status/{id}", ()),
]
FIXED_PATHS = [
    "/health",
    "/metrics",
    "/v1/models",
    "/api/v1/models",
    "/v1/chat/completions",
    "/v1/responses",
    "/api/v1/chat",
    "/api/v1/models/load",
    "/v1/messages",
    "/v1/completions",
    "/infill",
    "/v1",
    "/",
    "/api/v1/nope",
    "/api/chat",
    "/api/generate",
    "/api/tags",
    "/api/ps",
    "/api/version",
    "/api/delete",
    "/api/pull",
    "/api/nope",
    "/v1/nope/../models",
    "//v1//models",
    "/v1/models/",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PROPFIND", "TRACE"]
QUERY_VALUES = [  # the ones that once broke the server first: Hypothesis draws early entries more
    "%C2%B2",
    "%D9%A3",
    "99999999999999999999999",
    "-1",
    "0",
    "1_0",
    "%205",
    "1e3",
    "%00",
    "%FF%FE",
    "true",
    "asc",
    "",
    "x" * 3000,
]
IDS = ["resp_missing", "", "%00", "%FF", "é", "..", "resp_" + "a" * 2000, "chat", "job_x", "%2F", "a%20b"]
STORED_ID = "<a stored response>"
STORED: list[str] = []  # ids of responses the suite created, so ids that exist get fuzzed too


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("fuzz")
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(FakeUpstream(name="fuzz"))
        config = write_config(
            folder,
            {"api_keys": [API_KEY, "sk-second-key"], "max_json_depth": 64, "max_instances": 3},
            [
                scripted("chat", "chat.yaml"),
                upstream_model("up", upstream),
                scripted("loadable", "chat.yaml"),
            ],
        )
        # Downloads must fail at once, never reach out: no Hub, offline.
        env = {"HF_ENDPOINT": dead_url().removesuffix("/v1"), "HF_HUB_OFFLINE": "1"}
        server = stack.enter_context(run_server(folder, config, env=env))
        created = httpx.post(
            server.base_url + "/v1/responses",
            json={"model": "chat", "input": "hello"},
            headers=AUTH,
            timeout=30,
        )
        assert created.status_code == 200, created.text
        STORED.append(created.json()["id"])
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


def send(
    http: httpx.Client,
    method: str,
    path: str,
    *,
    content: bytes | None = None,
    content_type: str | None = "application/json",
    auth: bool = True,
) -> httpx.Response:
    headers = dict(AUTH) if auth else {}
    if content_type is not None and content is not None:
        headers["content-type"] = content_type
    response = http.request(method, path, content=content, headers=headers)
    if method != "HEAD":
        check_answer(method, path.split("?")[0], response)
    else:
        assert response.status_code < 500, (method, path, response.status_code)
    return response


# --- property tests ---------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "bodies"), BODY_ROUTES, ids=[p for p, _ in BODY_ROUTES])
def test_mutated_bodies(http: httpx.Client, path: str, bodies: st.SearchStrategy[dict[str, Any]]) -> None:
    @FUZZ
    @given(data=mutated(bodies), content_type=st.sampled_from(CONTENT_TYPES))
    def attack(data: bytes, content_type: str | None) -> None:
        response = send(http, "POST", path, content=data, content_type=content_type)
        if (
            response.status_code == 200
            and path == "/v1/responses"
            and "application/json" in response.headers.get("content-type", "")
        ):
            STORED.append(response.json()["id"])

    attack()


@pytest.mark.parametrize("route", ID_ROUTES, ids=[f"{m} {t}" for m, t, _ in ID_ROUTES])
def test_ids_and_query_strings(http: httpx.Client, route: tuple[str, str, tuple[str, ...]]) -> None:
    method, template, names = route

    @settings(FUZZ, max_examples=max(10, FUZZ.max_examples // 3))
    @given(
        ident=st.one_of(st.sampled_from([STORED_ID, STORED_ID, *IDS]), st.text(max_size=20)),
        query=st.lists(
            st.tuples(st.sampled_from(names or ("x",)), st.sampled_from(QUERY_VALUES)), max_size=3
        ),
    )
    def attack(ident: str, query: list[tuple[str, str]]) -> None:
        if ident == STORED_ID:  # one that exists (deleting it would spoil it for the next examples)
            ident = STORED[0] if method != "DELETE" else "resp_missing"
        quoted = ident if ident in IDS else urllib.parse.quote(ident, safe="")
        path = template.replace("{id}", quoted)
        if query:
            path += "?" + "&".join(f"{k}={v}" for k, v in query)
        send(http, method, path)

    attack()


def test_every_query_parameter_with_every_odd_value(http: httpx.Client) -> None:
    """The deterministic counterpart: each query parameter of each route, on a stored background
    response (it can be streamed again), with each odd value."""
    response_id = stored_response(http, background=True)
    for method, template, names in ID_ROUTES:
        if method == "DELETE":
            continue
        for name in names:
            for value in QUERY_VALUES:
                path = template.replace("{id}", response_id) + f"?{name}={value}"
                if name == "starting_after":
                    path += "&stream=true"
                send(http, method, path)


@FUZZ
@given(
    path=st.sampled_from(FIXED_PATHS),
    method=st.sampled_from(METHODS),
    body=st.one_of(st.none(), st.just(b"{}"), st.just(b'{"model": "chat"}'), st.binary(max_size=64)),
)
def test_every_route_and_method(http: httpx.Client, path: str, method: str, body: bytes | None) -> None:
    if path in ("/v1/chat/completions", "/v1/responses", "/api/v1/chat") and method == "POST" and body:
        body = b"{}"  # a valid call there is the body tests' business; keep this one quick
    send(http, method, path, content=body)


@FUZZ
@given(
    path=st.sampled_from(
        [*FIXED_PATHS, "/v1/responses/resp_x/input_items", "/api/v1/models/download/status/j"]
    ),
    method=st.sampled_from(METHODS),
    key=st.sampled_from([None, "", "sk-wrong", API_KEY[:-1], API_KEY + "x", "Basic " + API_KEY]),
    header=st.sampled_from(["authorization", "x-api-key"]),
)
def test_no_route_answers_without_a_key(
    http: httpx.Client, path: str, method: str, key: str | None, header: str
) -> None:
    headers = {}
    if key is not None:
        bearer = header == "authorization" and not key.startswith("Basic")
        headers[header] = f"Bearer {key}".strip() if bearer else key
    response = http.request(method, path, headers=headers)
    # The path the server got (httpx folds `//v1//models` into `/models`: the listing for an API
    # client, the page for a browser).
    sent = {"path": response.request.url.path, "headers": response.request.headers.raw}
    if is_open_request(sent):  # /health and the pages, which hold no data
        assert response.status_code != 401
        return
    assert response.status_code == 401, (method, path, response.status_code, response.text)
    if method != "HEAD":
        check_answer(method, path, response)


# Every parameter of every chat dialect, set to each of the values that broke the server once,
# on both model kinds: a deterministic sweep beside the random search above.
NEVER_VALID: list[Any] = [  # for any parameter: a 400 naming it (or the depth limit)
    2**64,
    -(2**64),
    2**63,
    -(2**63) - 1,
    10**30,
    1e308,
    -1e308,
    Raw(b"NaN"),
    Raw(b"-Infinity"),
    Raw(b"1e400"),
    deep(65),
    deep(300),
]
SOMETIMES_VALID: list[Any] = [2**31, -1, "x" * 20_000, [None], {"a": 2**64}]
SWEEP = {
    "/v1/chat/completions": (
        {"messages": [{"role": "user", "content": "hi"}]},
        ["temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
         "seed", "max_tokens", "max_completion_tokens", "n", "top_logprobs", "stop", "ttl", "tools",
         "tool_choice", "response_format", "chat_template_kwargs", "stream_options", "logit_bias",
         "messages"],
    ),
    "/v1/responses": (
        {"input": "hi"},
        ["temperature", "top_p", "presence_penalty", "frequency_penalty", "seed", "max_output_tokens",
         "top_logprobs", "max_tool_calls", "ttl", "metadata", "tools", "tool_choice", "text", "reasoning",
         "include", "input", "instructions", "previous_response_id"],
    ),
    "/api/v1/chat": (
        {"input": "hi"},
        ["temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_output_tokens", "context_length",
         "integrations", "input", "system_prompt", "previous_response_id", "reasoning"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("path", list(SWEEP))
def test_every_parameter_with_every_hostile_value(http: httpx.Client, path: str) -> None:
    base, parameters = SWEEP[path]
    for model in ("up", "chat"):
        for parameter in parameters:
            for value in NEVER_VALID + SOMETIMES_VALID:
                response = send(http, "POST", path, content=dumps({**base, "model": model, parameter: value}))
                if value in SOMETIMES_VALID:
                    continue
                assert response.status_code == 400, (path, model, parameter, value, response.text[:200])
                param = response.json()["error"].get("param")
                assert param is None or param.startswith(parameter), (path, parameter, value, param)


# --- the reproductions, and what the fuzzing is built on -----------------------------


def post(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    return send(http, "POST", path, content=dumps(body))


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.parametrize("param", ["seed", "max_tokens", "top_k"])
@pytest.mark.parametrize("value", [2**64, 2**64 + 7, -(2**64)])
def test_chat_integers_past_64_bits_upstream(http: httpx.Client, param: str, value: int) -> None:
    body = {"model": "up", "messages": [{"role": "user", "content": "hi"}], param: value}
    response = post(http, "/v1/chat/completions", body)
    assert response.status_code == 400
    assert error_of(response)["param"] == param


@pytest.mark.parametrize("param", ["seed", "max_output_tokens"])
def test_responses_integers_past_64_bits_upstream(http: httpx.Client, param: str) -> None:
    response = post(http, "/v1/responses", {"model": "up", "input": "hi", param: 2**64})
    assert response.status_code == 400
    assert error_of(response)["param"] == param


@pytest.mark.parametrize("param", ["top_k", "max_output_tokens", "context_length"])
def test_lmstudio_integers_past_64_bits_upstream(http: httpx.Client, param: str) -> None:
    response = post(http, "/api/v1/chat", {"model": "up", "input": "hi", param: 2**64})
    assert response.status_code == 400
    assert error_of(response)["param"] == param


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("max_tokens", 2**31),
        ("seed", 2**63),
        ("seed", -(2**63) - 1),
        ("top_k", 2**31),
        ("temperature", 1e308),
        ("repeat_penalty", 1e308),
        ("ttl", 1e308),
        ("presence_penalty", -1e308),
    ],
)
def test_chat_numbers_bounded(http: httpx.Client, param: str, value: float) -> None:
    response = post(
        http,
        "/v1/chat/completions",
        {"model": "chat", "messages": [{"role": "user", "content": "hi"}], param: value},
    )
    assert response.status_code == 400
    assert error_of(response)["param"] == param


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_literals(http: httpx.Client, literal: bytes) -> None:
    body = (
        b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "temperature": ' + literal + b"}"
    )
    assert send(http, "POST", "/v1/chat/completions", content=body).status_code == 400


def test_seed_limits_are_served(http: httpx.Client) -> None:
    """int64's own limits are seeds like any other: scripted and upstream both answer."""
    for model in ("chat", "up"):
        for seed in (2**63 - 1, -(2**63), -1):
            response = post(
                http,
                "/v1/chat/completions",
                {"model": model, "messages": [{"role": "user", "content": "hi"}], "seed": seed},
            )
            assert response.status_code == 200, response.text


@pytest.mark.parametrize("depth", [255, 256, 1000])
def test_deep_chat_template_kwargs(http: httpx.Client, depth: int) -> None:
    body = {
        "model": "up",
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": deep(depth),
    }
    response = post(http, "/v1/chat/completions", body)
    assert response.status_code == 400
    assert "max_json_depth" in error_of(response)["message"]


def test_deep_function_call_output(http: httpx.Client) -> None:
    item = {"type": "function_call_output", "call_id": "call_1", "output": deep(300)}
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    response = post(http, "/v1/responses", {"model": "up", "input": [call, item]})
    assert response.status_code == 400
    assert "max_json_depth" in error_of(response)["message"]


def test_deep_tool_schema(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": deep(300, b"{}")}}
    response = post(
        http,
        "/v1/chat/completions",
        {"model": "up", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]},
    )
    assert response.status_code == 400


def test_nesting_just_under_the_limit_is_served(http: httpx.Client) -> None:
    """64 levels in all, the body included (body > tools > [0] > function > parameters > x:
    5 + 59): everything that walks client JSON copes with it."""
    hi = [{"role": "user", "content": "hi"}]
    # body(1) > chat_template_kwargs(2) > 62 more
    assert (
        post(
            http, "/v1/chat/completions", {"model": "up", "messages": hi, "chat_template_kwargs": deep(63)}
        ).status_code
        == 200
    )
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "x": deep(59)}}}
    for model in ("up", "chat"):
        response = post(http, "/v1/chat/completions", {"model": model, "messages": hi, "tools": [tool]})
        assert response.status_code == 200, response.text
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": deep(61)}
    for model in ("up", "chat"):
        response = post(http, "/v1/responses", {"model": model, "input": [call, output]})
        assert response.status_code == 200, response.text
    too_deep = post(
        http, "/v1/chat/completions", {"model": "up", "messages": hi, "chat_template_kwargs": deep(64)}
    )
    assert too_deep.status_code == 400


def stored_response(http: httpx.Client, *, background: bool = False) -> str:
    """A fresh stored response (the fuzzing may have deleted the suite's first one)."""
    response = post(http, "/v1/responses", {"model": "chat", "input": "hi", "background": background})
    assert response.status_code == 200, response.text
    response_id: str = response.json()["id"]
    return response_id


def test_input_items_limit_superscript_two(http: httpx.Client) -> None:
    response_id = stored_response(http)
    response = send(http, "GET", f"/v1/responses/{response_id}/input_items?limit=%C2%B2")
    assert response.status_code == 400
    assert error_of(response)["param"] == "limit"
    assert send(http, "GET", f"/v1/responses/{response_id}/input_items?limit=2").status_code == 200


@pytest.mark.parametrize("value", ["%C2%B2", "%D9%A3", "1_0", "%205", "99999999999999999999999", "x"])
def test_starting_after_is_ascii_digits(http: httpx.Client, value: str) -> None:
    response = send(
        http,
        "GET",
        f"/v1/responses/{stored_response(http, background=True)}?stream=true&starting_after={value}",
    )
    assert response.status_code == 400
    assert error_of(response)["param"] == "starting_after"


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/nope", "openai"),
        ("/api/v1/nope", "lmstudio"),
        ("/v1/messages", "anthropic"),
        ("/v1/messages/count_tokens", "anthropic"),
        ("/metrics", "openai"),
    ],
)
def test_auth_before_routing(http: httpx.Client, path: str, shape: str) -> None:
    for method in ("GET", "POST", "DELETE", "PROPFIND"):
        response = http.request(method, path)
        assert response.status_code == 401, (method, path, response.text)
        body = response.json()
        if shape == "anthropic":
            assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
        else:
            assert body["error"]["type"] == "authentication_error" or shape == "lmstudio", body
            assert body["error"]["code"] == "invalid_api_key", body
    assert http.get("/health").status_code == 200
    second = http.get("/v1/models", headers={"x-api-key": "sk-second-key"})
    assert second.status_code == 200, second.text


# --- requests the HTTP parser refuses: raw sockets ---------------------------------------------


def raw_request(server: Server, data: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):
                head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                headers = dict(
                    line.decode("latin-1").lower().split(": ", 1) for line in head.split(b"\r\n")[1:]
                )
                if len(body) >= int(headers.get("content-length", "0")):
                    status = int(head.split(b" ")[1])
                    return status, headers, body[: int(headers.get("content-length", "0"))]
    raise AssertionError(f"no complete response to {data!r}: {b''.join(chunks)!r}")


@pytest.mark.parametrize(
    ("data", "shape"),
    [
        (b"FOO /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "openai"),
        (b"FOO /api/v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "lmstudio"),
        (b"GET /v1/mo dels HTTP/1.1\r\nHost: x\r\n\r\n", "openai"),
        (b"GET /v1/mod\xc3\xa9ls HTTP/1.1\r\nHost: x\r\n\r\n", "openai"),
        (b"GET /api/v1/\xff HTTP/1.1\r\nHost: x\r\n\r\n", "lmstudio"),
        (b"GET /v1/models HTTP/1.1\r\nHost x\r\n\r\n", "openai"),
        (b"GET /v1/models HTTP/1.1\r\nBad Header: x\r\n\r\n", "openai"),
        (b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", "openai"),
        (b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: \xc2\xb2\r\n\r\n", "openai"),
        (b"GET /v1/models HTTP/9.9\r\n\r\n", "openai"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "openai"),  # TLS to a plain-HTTP port
    ],
)
def test_malformed_requests_get_json(server: Server, data: bytes, shape: str) -> None:
    status, headers, body = raw_request(server, data)
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    import json

    error = json.loads(body)["error"]
    assert error["message"] == "Invalid HTTP request received."
    assert ("param" in error) == (shape == "openai"), error


def test_methods_the_parser_knows_reach_the_app(server: Server) -> None:
    auth = f"Authorization: Bearer {API_KEY}\r\n".encode()
    status, _, body = raw_request(server, b"PROPFIND /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 401, body  # auth first: no route is revealed
    status, _, body = raw_request(server, b"PROPFIND /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
    assert status == 405, body
    status, _, body = raw_request(server, b"PURGE /v1/nope HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
    assert status == 404, body


def test_a_client_gone_mid_body_is_not_an_error(server: Server) -> None:
    """Headers promise 1000 bytes, 10 come, the connection closes: no traceback in the log
    (checked at the end of the module), and the server keeps serving."""
    host, port = server.base_url.removeprefix("http://").split(":")
    for path in ("/v1/chat/completions", "/v1/responses", "/api/v1/chat", "/api/v1/models/load"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            sock.sendall(
                head.encode() + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":'
            )
    status, _, _ = raw_request(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200


# --- caps -----------------------------------------------------------------------------------------


def test_instances_per_model_are_capped(http: httpx.Client) -> None:
    loaded = []
    for _ in range(3):
        response = post(http, "/api/v1/models/load", {"model": "loadable"})
        assert response.status_code == 200, response.text
        loaded.append(response.json()["instance_id"])
    assert len(set(loaded)) == 3  # the first instance, then `:2` and `:3`
    for _ in range(5):
        refused = post(http, "/api/v1/models/load", {"model": "loadable"})
        assert refused.status_code == 400
        assert "max_instances" in error_of(refused)["message"]
    listed = send(http, "GET", "/api/v1/models").json()["models"]
    entry = next(m for m in listed if m["key"] == "loadable")
    assert len(entry["loaded_instances"]) == 3
    assert post(http, "/api/v1/models/unload", {"instance_id": "loadable:3"}).status_code == 200
    assert post(http, "/api/v1/models/load", {"model": "loadable"}).status_code == 200


# --- after the run ----------------------------------------------------------------------------------


def test_zz_server_is_healthy_after_the_run(http: httpx.Client, server: Server) -> None:
    """Last in this module: a normal request still works, nothing is left in flight, and the
    log never shows a traceback."""
    response = http.post(
        "/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        headers=AUTH,
    )
    assert response.status_code == 200, response.text
    for model in ("chat", "up"):
        response = http.post("/api/v1/chat", json={"model": model, "input": "hi"}, headers=AUTH)
        assert response.status_code == 200, response.text
    totals = settled(http)
    assert totals["sluicegate_requests_in_flight"] == 0, totals
    assert totals["sluicegate_generations_active"] == 0, totals
    assert totals["sluicegate_requests_total"] > 300, totals  # the attack did happen
    output = server.output()
    assert "Traceback" not in output, output[-5000:]
    assert "Exception in ASGI application" not in output


def settled(http: httpx.Client, tries: int = 200) -> dict[str, float]:
    """The gauges once no turn is in flight, or as they are after `tries` polls (then the caller's
    assertion names what leaked): a turn is in flight until its handler returns, which can be
    after its client has read the last byte and sent the next request (the records and the
    upstream's release follow the response)."""
    for _ in range(tries):
        totals = gauges(http)
        if totals["sluicegate_requests_in_flight"] == 0 and totals["sluicegate_generations_active"] == 0:
            return totals
        time.sleep(0.05)
    return totals


def gauges(http: httpx.Client) -> dict[str, float]:
    """Every sample of /metrics summed by name, labels ignored."""
    return metric_totals(send(http, "GET", "/metrics").text)
