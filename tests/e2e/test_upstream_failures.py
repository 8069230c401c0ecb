"""Gateway mode, when the upstream misbehaves: refusals before the first byte are HTTP errors
in the dialect's shape, failures after it end the stream with the dialect's error events,
every timeout fires, heartbeats flow while the upstream is silent, and a client that leaves
closes the upstream connection at once — also before the upstream's first byte."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, assert_openai_error, parse_sse
from fake_upstream import FakeUpstream, Scenario, chunk, usage
from upstream_support import unanswered_url, upstream_model

pytestmark = pytest.mark.e2e

HEARTBEAT = 0.2
TIMEOUT = 1.0  # first byte / idle / total, for the models that test them
PROMPT = [{"role": "user", "content": "Hi"}]

UPSTREAM_400 = b'{"error":{"message":"max_tokens is too large: 99999","type":"BadRequestError","param":"max_tokens","code":400}}'
SCENARIOS = {
    "bad-request": Scenario(status=400, body=UPSTREAM_400),
    "bad-key": Scenario(
        status=401,
        body=b'{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}',
    ),
    "gone-model": Scenario(
        status=404,
        body=b'{"object":"error","message":"The model `gone-model` does not exist.","type":"NotFoundError","param":null,"code":404}',
    ),
    "limited": Scenario(status=429, body=b"Too Many Requests", content_type="text/plain"),
    "broken": Scenario(
        status=500, body=b"<html><body>Internal Server Error</body></html>", content_type="text/html"
    ),
    "mid-error": Scenario(
        frames=[
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Partial"}, usage=usage(4, 1)),
            b'data: {"error":{"message":"CUDA error: out of memory","type":"InternalServerError","param":null,"code":500}}\n\n',
        ]
    ),
    "event-error": Scenario(
        frames=[chunk({"content": "x"}), b'event: error\ndata: {"message":"slot 3 crashed"}\n\n']
    ),
    "early-close": Scenario(frames=[chunk({"content": "cut"})], done=False),
    "abrupt": Scenario(frames=[chunk({"content": "cut"})], done=False, abrupt=True),
    "no-done": Scenario(frames=[chunk({"content": "fine"}), chunk(finish_reason="stop")], done=False),
    "stall-headers": Scenario(headers_delay=60),
    "stall-body": Scenario(frames=[chunk({"content": "late"})], body_delay=60),
    "stall-mid": Scenario(frames=[chunk({"content": "first"}), None]),
    "dribble": Scenario(frames=[chunk({"content": f"w{i} "}) for i in range(100)], frame_delay=0.05),
}
TIMED = {"first_byte_timeout": TIMEOUT, "idle_timeout": TIMEOUT, "health_check_interval": 0}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="failures") as upstream:
        upstream.scenarios.update(SCENARIOS)
        yield upstream


@pytest.fixture(scope="module")
def server(start_server: StartServer, fake: FakeUpstream) -> Iterator[Server]:
    with unanswered_url() as nowhere:
        models = [upstream_model(name, fake, **TIMED) for name in SCENARIOS]
        models.append(
            upstream_model("dribble-total", fake, scenario="dribble", total_timeout=TIMEOUT, **TIMED)
        )
        models.append(upstream_model("unreachable", nowhere, connect_timeout=0.5, health_check_interval=0))
        # No first-byte limit: only the client leaving ends these.
        models.append(
            upstream_model(
                "wait-headers", fake, scenario="stall-headers", first_byte_timeout=0, health_check_interval=0
            )
        )
        models.append(
            upstream_model("wait-mid", fake, scenario="stall-mid", idle_timeout=0, health_check_interval=0)
        )
        yield start_server({"heartbeat_seconds": HEARTBEAT}, models)


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
        yield sdk


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.api_url + path, json=body, timeout=30)


# --- refusals before the first byte: HTTP errors ---------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("model", "status", "error_type", "code", "words"),
    [
        ("bad-request", 400, "invalid_request_error", 400, "max_tokens is too large"),
        ("bad-key", 502, "api_error", "invalid_api_key", "refused Sluicegate's credentials"),
        ("gone-model", 404, "invalid_request_error", "model_not_found", "does not exist"),
        ("limited", 429, "rate_limit_error", "rate_limit_exceeded", "Too Many Requests"),
        ("broken", 502, "api_error", "upstream_error", "Internal Server Error"),
    ],
)
def test_upstream_refusals_are_chat_http_errors(
    server: Server, model: str, status: int, error_type: str, code: Any, words: str, stream: bool
) -> None:
    response = post(server, "/chat/completions", {"model": model, "messages": PROMPT, "stream": stream})
    error = assert_openai_error(
        response,
        status,
        param="max_tokens" if model == "bad-request" else "model" if status == 404 else None,
        type=error_type,
    )
    assert words in error["message"]
    assert error["code"] == (None if code == 400 else code)


def test_upstream_refusals_reach_the_sdk_in_both_dialects(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens is too large"):
        client.chat.completions.create(model="bad-request", messages=PROMPT, stream=True)  # type: ignore[arg-type]
    with (
        pytest.raises(openai.BadRequestError, match="max_tokens is too large"),
        client.responses.stream(model="bad-request", input="Hi"),
    ):
        pass
    with pytest.raises(openai.RateLimitError), client.responses.stream(model="limited", input="Hi"):
        pass
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model="bad-key", input="Hi")
    assert caught.value.status_code == 502


# --- failures after the first byte: the dialect's error events --------------------------------


def chat_failure(client: openai.OpenAI, model: str) -> tuple[str, openai.APIError]:
    text = ""
    with pytest.raises(openai.APIError) as caught:
        for part in client.chat.completions.create(model=model, messages=PROMPT, stream=True):  # type: ignore[arg-type]
            if part.choices:
                text += part.choices[0].delta.content or ""
    return text, caught.value


def responses_failure(client: openai.OpenAI, model: str) -> dict[str, Any]:
    with client.responses.stream(model=model, input="Hi") as stream:
        events = [e for e in stream]
    assert events[-1].type == "response.failed", [e.type for e in events]
    failed = events[-1].response.model_dump()  # type: ignore[union-attr]
    assert failed["status"] == "failed" and failed["error"]["message"]
    return failed


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("mid-error", "CUDA error: out of memory"),
        ("event-error", "slot 3 crashed"),
        ("early-close", "closed the stream before it finished"),
        ("abrupt", "connection broke"),
    ],
)
def test_failures_mid_stream_end_both_dialects_properly(
    client: openai.OpenAI, model: str, words: str
) -> None:
    text, error = chat_failure(client, model)
    assert words in error.message
    assert text in ("Partial", "x", "cut")
    failed = responses_failure(client, model)
    assert words in failed["error"]["message"]


def test_usage_reported_before_a_failure_is_kept(client: openai.OpenAI) -> None:
    failed = responses_failure(client, "mid-error")
    assert failed["usage"]["input_tokens"] == 4


def test_a_stream_without_done_after_its_finish_reason_is_fine(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="no-done", messages=PROMPT)
    assert completion.choices[0].message.content == "fine"


# --- timeouts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "code", "words"),
    [
        ("stall-headers", "upstream_first_byte_timeout", "first_byte_timeout"),
        ("stall-body", "upstream_first_byte_timeout", "first_byte_timeout"),
        ("unreachable", "upstream_connect_timeout", "timed out"),
    ],
)
def test_timeouts_before_the_first_byte_are_504(server: Server, model: str, code: str, words: str) -> None:
    error = assert_openai_error(
        post(server, "/chat/completions", {"model": model, "messages": PROMPT}), 504, param=None
    )
    assert error["code"] == code and words in error["message"]


@pytest.mark.parametrize(
    ("model", "code"),
    [
        ("stall-headers", "upstream_first_byte_timeout"),  # waited out after one heartbeat interval
        ("stall-body", "upstream_first_byte_timeout"),
        ("stall-mid", "upstream_idle_timeout"),
        ("dribble-total", "upstream_total_timeout"),
    ],
)
def test_timeouts_end_chat_streams_with_an_error_event_after_heartbeats(
    server: Server, model: str, code: str
) -> None:
    started = time.monotonic()
    with httpx.stream(
        "POST",
        server.api_url + "/chat/completions",
        json={"model": model, "messages": PROMPT, "stream": True},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        frames = parse_sse(b"".join(response.iter_raw()).decode())
    assert time.monotonic() - started >= TIMEOUT * 0.9
    errors = [f.json() for f in frames if f.event == "error"]
    assert [e["error"]["code"] for e in errors] == [code]
    assert errors[0]["error"]["type"] == "timeout_error"
    assert frames[-1].is_done
    if model != "dribble-total":
        assert (
            sum(f.is_heartbeat for f in frames) >= 2
        )  # the client heard from us while the upstream was silent


@pytest.mark.parametrize("model", ["stall-mid", "dribble-total"])
def test_timeouts_fail_responses_streams(client: openai.OpenAI, model: str) -> None:
    failed = responses_failure(client, model)
    assert "timeout" in failed["error"]["message"]


# --- cancellation ----------------------------------------------------------------------------


def disconnect_after(
    server: Server, fake: FakeUpstream, model: str, path: str, body: dict[str, Any], ready: Any
) -> float:
    """Send `body` on a raw socket, close it once `ready(upstream request)` holds (whether or not
    our response has started); the seconds until the upstream saw its connection close."""
    before = len(fake.chat_requests(model))
    payload = json.dumps(body).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        fake.wait_for(
            lambda: len(fake.chat_requests(model)) > before and ready(fake.chat_requests(model)[-1])
        )
        closed_at = time.monotonic()
    observed = fake.chat_requests(model)[-1]
    fake.wait_for(lambda: observed.disconnected_at is not None, timeout=5)
    assert observed.disconnected_at is not None
    return observed.disconnected_at - closed_at


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("path", "extra"), [("/chat/completions", {"messages": PROMPT}), ("/responses", {"input": "Hi"})]
)
def test_leaving_before_the_first_byte_closes_the_upstream_at_once(
    server: Server, fake: FakeUpstream, path: str, extra: dict[str, Any], stream: bool
) -> None:
    # The upstream has not even sent its status line; without streaming, the route itself is
    # still waiting for it (nothing sent to the client yet).
    body = {"model": "wait-headers", "stream": stream, **extra}
    assert disconnect_after(server, fake, "stall-headers", path, body, lambda r: True) < 0.5


def test_leaving_mid_stream_closes_the_upstream_at_once(server: Server, fake: FakeUpstream) -> None:
    body = {"model": "wait-mid", "stream": True, "messages": PROMPT}
    assert (
        disconnect_after(
            server, fake, "stall-mid", "/chat/completions", body, lambda r: r.answered_status == 200
        )
        < 0.5
    )
