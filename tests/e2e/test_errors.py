"""Bad input and refusals before a stream starts: the right HTTP status and the OpenAI error body
`{"error": {"message", "type", "param", "code"}}` naming the parameter, never a 500 or a trace;
and the SDK's typed exceptions for each."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import DEFAULT_REPLY, Server, assert_openai_error, chat_body, poll, scripted

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def post(server: Server, body: Any = None, *, content: bytes | None = None, **kwargs: Any) -> httpx.Response:
    if content is None:
        return httpx.post(server.base_url + CHAT, json=body, timeout=10, **kwargs)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return httpx.post(server.base_url + CHAT, content=content, headers=headers, timeout=10, **kwargs)


@pytest.mark.parametrize(
    "content",
    [b'{"model": "chat", "messages": [', b"not json at all", b'{"model": "chat",}', b"\xff\xfe\x00"],
    ids=["truncated", "garbage", "trailing-comma", "binary"],
)
def test_malformed_json(server: Server, content: bytes) -> None:
    error = assert_openai_error(post(server, content=content), 400, param=None, type="invalid_request_error")
    assert "JSON" in error["message"]


def test_empty_body(server: Server) -> None:
    assert_openai_error(post(server, content=b""), 400, param=None, type="invalid_request_error")


@pytest.mark.parametrize("body", [[1, 2], "a string", 42, None], ids=["array", "string", "number", "null"])
def test_body_not_an_object(server: Server, body: Any) -> None:
    import orjson

    error = assert_openai_error(
        post(server, content=orjson.dumps(body)), 400, param=None, type="invalid_request_error"
    )
    assert "object" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MESSAGES}, "model"),
        ({"model": "chat"}, "messages"),
        ({"model": "chat", "messages": []}, "messages"),
        ({"model": 7, "messages": MESSAGES}, "model"),
        ({"model": "chat", "messages": {"role": "user", "content": "hi"}}, "messages"),
        ({"model": "chat", "messages": ["hi"]}, "messages[0]"),
        ({"model": "chat", "messages": [{"content": "hi"}]}, "messages[0].role"),
        ({"model": "chat", "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"model": "chat", "messages": [{"role": "user"}]}, "messages[0].content"),
        ({"model": "chat", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": "chat", "messages": MESSAGES, "temperature": "hot"}, "temperature"),
        ({"model": "chat", "messages": MESSAGES, "temperature": 3}, "temperature"),
        ({"model": "chat", "messages": MESSAGES, "max_tokens": "ten"}, "max_tokens"),
        ({"model": "chat", "messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
        ({"model": "chat", "messages": MESSAGES, "stream": "yes"}, "stream"),
        (
            {"model": "chat", "messages": MESSAGES, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        (
            {"model": "chat", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
        ),
        ({"model": "chat", "messages": MESSAGES, "stop": 5}, "stop"),
        ({"model": "chat", "messages": MESSAGES, "top_logprobs": 2}, "top_logprobs"),
        ({"model": "chat", "messages": MESSAGES, "tools": {"type": "function"}}, "tools"),
        ({"model": "chat", "messages": MESSAGES, "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": "chat", "messages": MESSAGES, "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "chat", "messages": MESSAGES, "logit_bias": {"<|endoftext|>": -100}}, "logit_bias"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_parameters_name_the_param(server: Server, body: dict[str, Any], param: str) -> None:
    assert_openai_error(post(server, body), 400, param=param, type="invalid_request_error")


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model(server: Server, stream: bool) -> None:
    error = assert_openai_error(
        post(server, chat_body("no-such-model", "hi", stream=stream)),
        404,
        param="model",
        type="invalid_request_error",
        code="model_not_found",
    )
    assert "no-such-model" in error["message"]


@pytest.mark.parametrize("n", [0, 129])  # OpenAI's bounds: 1..128
def test_n_out_of_range_is_refused(server: Server, n: int) -> None:
    assert_openai_error(
        post(server, chat_body("chat", "hi", n=n)), 400, param="n", type="invalid_request_error"
    )


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/no/such/route", 404, "unknown_route"),
        ("POST", "/v2/chat/completions", 404, "unknown_route"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ],
)
def test_unknown_route_and_method(server: Server, method: str, path: str, status: int, code: str) -> None:
    response = httpx.request(method, server.base_url + path, timeout=10)
    assert_openai_error(response, status, param=None, type="invalid_request_error", code=code)


def test_sdk_typed_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)  # type: ignore[arg-type]
    assert not_found.value.status_code == 404
    assert not_found.value.code == "model_not_found"
    assert not_found.value.param == "model"

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)  # type: ignore[arg-type]

    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="chat", messages=[])
    assert bad.value.status_code == 400
    assert bad.value.param == "messages"
    assert bad.value.type == "invalid_request_error"

    with pytest.raises(openai.BadRequestError) as bad_type:
        client.chat.completions.create(model="chat", messages=MESSAGES, temperature="hot")  # type: ignore[arg-type]
    assert bad_type.value.param == "temperature"

    with pytest.raises(openai.BadRequestError) as bad_n:
        client.chat.completions.create(model="chat", messages=MESSAGES, n=0)  # type: ignore[arg-type]
    assert bad_n.value.param == "n"


# --- oversize bodies --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_body_server(start_server: StartServer) -> Server:
    return start_server({"max_body_bytes": 2048}, [scripted("chat", "chat.yaml")])


def test_oversize_body(small_body_server: Server) -> None:
    body = chat_body("chat", "x" * 4096)
    error = assert_openai_error(post(small_body_server, body), 413, param=None, code="request_too_large")
    assert "max_body_bytes" in error["message"]
    # Just under the limit still works.
    assert post(small_body_server, chat_body("chat", "x" * 1000)).status_code == 200


def test_oversize_chunked_body(small_body_server: Server) -> None:
    """No Content-Length to trust: the limit is enforced while reading."""

    def body() -> Iterator[bytes]:
        yield b'{"model": "chat", "messages": [{"role": "user", "content": "'
        for _ in range(8):
            yield b"x" * 512
        yield b'"}]}'

    response = httpx.post(
        small_body_server.base_url + CHAT,
        content=body(),
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert "content-length" not in response.request.headers
    assert_openai_error(response, 413, param=None, code="request_too_large")


def test_oversize_body_sdk(small_body_server: Server) -> None:
    with (
        openai.OpenAI(base_url=small_body_server.api_url, api_key="x", max_retries=0) as sdk,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        sdk.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x" * 4096}])
    assert caught.value.status_code == 413
    assert caught.value.code == "request_too_large"


# --- authentication -------------------------------------------------------------------------------

API_KEY = "sk-e2e-secret"


@pytest.fixture(scope="module")
def auth_server(start_server: StartServer) -> Server:
    return start_server({"api_key": API_KEY}, [scripted("chat", "chat.yaml")])


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"authorization": API_KEY}, {"x-api-key": "wrong"}],
    ids=["missing", "wrong", "no-bearer-prefix", "wrong-x-api-key"],
)
def test_auth_refused(auth_server: Server, headers: dict[str, str]) -> None:
    response = httpx.post(
        auth_server.base_url + CHAT, json=chat_body("chat", "hi"), headers=headers, timeout=10
    )
    assert_openai_error(response, 401, param=None, type="authentication_error", code="invalid_api_key")
    models = httpx.get(auth_server.base_url + "/v1/models", headers=headers, timeout=10)
    assert_openai_error(models, 401, param=None, type="authentication_error")


@pytest.mark.parametrize(
    "headers", [{"authorization": f"Bearer {API_KEY}"}, {"x-api-key": API_KEY}], ids=["bearer", "x-api-key"]
)
def test_auth_accepted(auth_server: Server, headers: dict[str, str]) -> None:
    response = httpx.post(
        auth_server.base_url + CHAT, json=chat_body("chat", "hi"), headers=headers, timeout=10
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == DEFAULT_REPLY


def test_auth_health_stays_open(auth_server: Server) -> None:
    assert httpx.get(auth_server.base_url + "/health", timeout=10).status_code == 200


def test_auth_sdk(auth_server: Server) -> None:
    with openai.OpenAI(base_url=auth_server.api_url, api_key="wrong", max_retries=0) as sdk:
        with pytest.raises(openai.AuthenticationError) as caught:
            sdk.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
        assert caught.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            sdk.chat.completions.create(model="chat", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    with (
        openai.OpenAI(base_url=auth_server.api_url, api_key=API_KEY, max_retries=0) as sdk,
        sdk.chat.completions.stream(model="chat", messages=MESSAGES) as stream,  # type: ignore[arg-type]
    ):
        assert stream.get_final_completion().choices[0].message.content == DEFAULT_REPLY


# --- the concurrency cap --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def capped_server(start_server: StartServer) -> Server:
    return start_server({"max_concurrent_requests": 1}, [scripted("slow", "slow.yaml")])


def test_concurrency_cap(capped_server: Server) -> None:
    base = capped_server.base_url
    holder = httpx.Client(base_url=base, timeout=10)
    first = holder.send(
        holder.build_request("POST", CHAT, json=chat_body("slow", "hi", stream=True)), stream=True
    )
    try:
        assert first.status_code == 200
        lines = first.iter_lines()
        assert next(lines).startswith("data: ")  # admitted and streaming

        for body in (chat_body("slow", "hi", stream=True), chat_body("slow", "hi")):
            error = assert_openai_error(
                httpx.post(base + CHAT, json=body, timeout=10),
                429,
                param=None,
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )
            assert "max_concurrent_requests" in error["message"]
        with (
            openai.OpenAI(base_url=capped_server.api_url, api_key="x", max_retries=0) as sdk,
            pytest.raises(openai.RateLimitError),
        ):
            sdk.chat.completions.create(model="slow", messages=MESSAGES)  # type: ignore[arg-type]
        # Requests that do not generate are not counted.
        assert httpx.get(base + "/v1/models", timeout=10).status_code == 200
    finally:
        first.close()
        holder.close()

    # The slot is given back once the first client is gone.
    def admitted() -> bool:
        body = chat_body("slow", "hi", max_tokens=2)
        return httpx.post(base + CHAT, json=body, timeout=10).status_code == 200

    assert poll(admitted, timeout=5.0, interval=0.05)


def test_concurrency_cap_two_threads(capped_server: Server) -> None:
    """Two clients at once: exactly one is served, the other gets 429."""
    statuses: list[int] = []
    barrier = threading.Barrier(2)

    def call() -> None:
        barrier.wait()
        body = chat_body("slow", "hi", max_tokens=30)  # about 1.5 s of generation
        statuses.append(httpx.post(capped_server.base_url + CHAT, json=body, timeout=10).status_code)

    def idle() -> bool:  # any earlier request has finished
        body = chat_body("slow", "hi", max_tokens=1)
        return httpx.post(capped_server.base_url + CHAT, json=body, timeout=10).status_code == 200

    assert poll(idle, timeout=5.0, interval=0.05)
    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(statuses) == [200, 429]


def test_model_queue_full_is_503(server: Server) -> None:
    """A model with one slot and no queue refuses a second request at once, never hangs it."""
    holder = httpx.Client(base_url=server.base_url, timeout=10)
    first = holder.send(
        holder.build_request("POST", CHAT, json=chat_body("single", "hi", stream=True)), stream=True
    )
    try:
        assert first.status_code == 200
        lines = first.iter_lines()
        assert next(lines).startswith("data: ")  # holding the model's only slot
        assert_openai_error(
            post(server, chat_body("single", "hi", stream=True)),
            503,
            param=None,
            type="server_error",
            code="server_overloaded",
        )
        with (
            openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0) as sdk,
            pytest.raises(openai.InternalServerError) as caught,
        ):
            sdk.chat.completions.create(model="single", messages=MESSAGES)  # type: ignore[arg-type]
        assert caught.value.status_code == 503
        # Other models are not affected.
        assert post(server, chat_body("chat", "hi")).status_code == 200
    finally:
        first.close()
        holder.close()

    def admitted() -> bool:
        return post(server, chat_body("single", "hi", max_tokens=1)).status_code == 200

    assert poll(admitted, timeout=5.0, interval=0.05)
