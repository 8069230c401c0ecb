"""Raw-wire checks with httpx: headers, chunk envelopes, delta rules, heartbeats, and the
endings of a stream (deadline, idle timeout, engine failure), each compared with the reference
`specs/chat-completions-streaming.md`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import (
    DEFAULT_REPLY,
    FAIL_CONTENT_WORDS,
    FAIL_MESSAGE,
    RawStream,
    Server,
    chat_body,
    metric,
    poll,
    scripted,
    stream_raw,
)

pytestmark = pytest.mark.e2e

ENVELOPE_KEYS = {"id", "object", "created", "model", "service_tier", "system_fingerprint", "choices"}
CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason"}


def assert_envelopes(stream: RawStream, model: str, *, include_usage: bool) -> list[dict[str, Any]]:
    chunks = stream.chunks
    assert chunks, stream.text
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    created = {c["created"] for c in chunks}
    assert len(created) == 1 and isinstance(next(iter(created)), int)
    for chunk in chunks:
        keys = set(chunk)
        assert keys - {"usage"} == ENVELOPE_KEYS, chunk
        assert ("usage" in keys) == include_usage, chunk
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["model"] == model
        assert len(chunk["choices"]) == 1
        choice = chunk["choices"][0]
        assert set(choice) == CHOICE_KEYS, choice
        assert choice["index"] == 0
    assert [c["choices"][0]["finish_reason"] is None for c in chunks] == [True] * (len(chunks) - 1) + [False]
    final = chunks[-1]["choices"][0]
    assert final["delta"] == {} and final["logprobs"] is None
    # role only in the first delta
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    # the stream ends with exactly one [DONE], last, and nothing after it
    assert stream.frames[-1].is_done
    assert sum(f.is_done for f in stream.frames) == 1
    assert stream.text.endswith("\n\ndata: [DONE]\n\n")
    return chunks


def test_headers_and_envelope(server: Server) -> None:
    stream = stream_raw(server.base_url, chat_body("chat", "hi", stream=True))
    headers = stream.response.headers
    assert headers["content-type"].split(";")[0] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    assert headers["connection"] == "keep-alive"
    assert headers["x-sluicegate-instance"] == "chat"
    chunks = assert_envelopes(stream, "chat", include_usage=False)
    assert headers["x-request-id"] == chunks[0]["id"]
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == DEFAULT_REPLY
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in chunks[1:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(f.event is None and not f.comments for f in stream.frames)
    # The build that answered, in every chunk: `b` first, as llama-server's clients read it.
    assert all(c["system_fingerprint"].startswith("b") for c in chunks)


def test_non_streaming_headers(server: Server) -> None:
    response = httpx.post(server.base_url + "/v1/chat/completions", json=chat_body("chat", "hi"), timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert response.headers["x-request-id"] == body["id"]
    assert response.headers["x-sluicegate-instance"] == "chat"
    assert body["object"] == "chat.completion"
    assert set(body) >= {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
    assert body["system_fingerprint"].startswith("b")


def test_include_usage_on_final_chunk_only(server: Server) -> None:
    body = chat_body("chat", "think hard", stream=True, stream_options={"include_usage": True})
    chunks = assert_envelopes(stream_raw(server.base_url, body), "chat", include_usage=True)
    assert all(c["usage"] is None for c in chunks[:-1])
    usage = chunks[-1]["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 5
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 8


def test_reasoning_deltas(server: Server) -> None:
    chunks = assert_envelopes(
        stream_raw(server.base_url, chat_body("chat", "think hard", stream=True)), "chat", include_usage=False
    )
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0]["role"] == "assistant"
    assert deltas[0].get("content") is None  # no message has started yet
    reasoning = [d for d in deltas if "reasoning_content" in d]
    content = [d for d in deltas if d.get("content")]
    assert "".join(d["reasoning_content"] for d in reasoning) == "Let me think about this step by step."
    assert "".join(d["content"] for d in content) == "The answer is 42."
    assert deltas.index(reasoning[-1]) < deltas.index(content[0])


def test_tool_call_delta_shapes(server: Server) -> None:
    body = chat_body("chat", "weather and time in two cities", stream=True)
    chunks = assert_envelopes(stream_raw(server.base_url, body), "chat", include_usage=False)
    tool_deltas = [
        (c["choices"][0]["delta"], call)
        for c in chunks
        for call in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    # The stream starts with the first call: role and content null come with it.
    first_delta = chunks[0]["choices"][0]["delta"]
    assert first_delta["role"] == "assistant" and first_delta["content"] is None
    seen: set[int] = set()
    arguments: dict[int, str] = {}
    for delta, call in tool_deltas:
        assert len(delta["tool_calls"]) == 1
        if call["index"] not in seen:
            seen.add(call["index"])
            assert set(call) == {"index", "id", "type", "function"}, call
            assert call["type"] == "function"
            assert set(call["function"]) == {"name", "arguments"}
            assert call["function"]["name"] in ("get_weather", "get_time")
        else:
            assert set(call) == {"index", "function"}, call
            assert set(call["function"]) == {"arguments"}, call
        arguments[call["index"]] = arguments.get(call["index"], "") + call["function"]["arguments"]
    assert [call["index"] for _, call in tool_deltas] == sorted(call["index"] for _, call in tool_deltas)
    assert seen == {0, 1}
    assert json.loads(arguments[0]) == {"city": "Paris", "unit": "celsius"}
    assert json.loads(arguments[1]) == {"city": "Tokyo", "format": "24h"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_refusal_delta_shapes(server: Server) -> None:
    chunks = assert_envelopes(
        stream_raw(server.base_url, chat_body("chat", "the secret", stream=True)), "chat", include_usage=False
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": ""}
    assert all(set(c["choices"][0]["delta"]) == {"refusal"} for c in chunks[1:-1])


def test_logprobs_on_the_wire(server: Server) -> None:
    body = chat_body("chat", "hi", stream=True, logprobs=True, top_logprobs=1)
    chunks = assert_envelopes(stream_raw(server.base_url, body), "chat", include_usage=False)
    for chunk in chunks[1:-1]:
        choice = chunk["choices"][0]
        token = choice["delta"]["content"]
        assert choice["logprobs"] == {
            "content": [
                {
                    "token": token,
                    "logprob": 0.0,
                    "bytes": list(token.encode()),
                    "top_logprobs": [{"token": token, "logprob": 0.0, "bytes": list(token.encode())}],
                }
            ],
            "refusal": None,
        }


def test_pre_stream_error_is_json_not_sse(server: Server) -> None:
    response = httpx.post(
        server.base_url + "/v1/chat/completions", json=chat_body("nope", "hi", stream=True), timeout=10
    )
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == "model_not_found"


# --- mid-stream engine failure -----------------------------------------------------------------


def assert_error_ending(stream: RawStream, error_type: str | None, code: str) -> dict[str, Any]:
    """`event: error` with the OpenAI error body, then `data: [DONE]`, and nothing after."""
    frames = [f for f in stream.frames if not f.is_heartbeat]
    assert frames[-1].is_done, stream.text
    error_frame = frames[-2]
    assert error_frame.event == "error", stream.text
    body = error_frame.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == error_type
    assert body["error"]["code"] == code
    assert [f for f in stream.frames if f.event is not None] == [error_frame]
    # no finish chunk: the generation did not finish
    assert all(c["choices"][0]["finish_reason"] is None for c in stream.chunks)
    error: dict[str, Any] = body["error"]
    return error


def test_mid_stream_engine_error(server: Server) -> None:
    stream = stream_raw(server.base_url, chat_body("chat", "please fail", stream=True))
    error = assert_error_ending(stream, "api_error", "scripted_failure")
    assert error["message"] == FAIL_MESSAGE
    contents = [c["choices"][0]["delta"].get("content") for c in stream.chunks]
    assert contents == ["", *FAIL_CONTENT_WORDS]  # what came before the failure was delivered


def test_mid_stream_engine_error_sdk(client: openai.OpenAI) -> None:
    received = []
    stream = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "please fail"}], stream=True
    )
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "".join(FAIL_CONTENT_WORDS)
    assert caught.value.message == FAIL_MESSAGE
    assert caught.value.type == "api_error"
    assert caught.value.code == "scripted_failure"


def test_engine_error_non_streaming(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "please fail"}])
    assert caught.value.status_code == 500
    assert caught.value.type == "api_error"
    assert caught.value.code == "scripted_failure"


# --- heartbeats ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def beating_server(start_server: StartServer) -> Server:
    return start_server({"heartbeat_seconds": 0.2}, [scripted("late", "late.yaml")])


def test_heartbeats_before_first_chunk(beating_server: Server) -> None:
    """The engine says nothing for a second: heartbeats go out from the start, then the chunks."""
    stream = stream_raw(beating_server.base_url, chat_body("late", "hi", stream=True))
    kinds = ["heartbeat" if f.is_heartbeat else "data" for f in stream.frames]
    assert "heartbeat" in kinds
    assert kinds[0] == "heartbeat", kinds
    assert stream.text.startswith(": heartbeat\n\n")
    assert all(f.is_heartbeat or f.data is not None for f in stream.frames)
    chunks = assert_envelopes(stream, "late", include_usage=False)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Finally, an answer."


def test_heartbeats_are_ignored_by_the_sdk(beating_server: Server) -> None:
    with openai.OpenAI(base_url=beating_server.api_url, api_key="x", max_retries=0) as sdk:
        chunks = list(
            sdk.chat.completions.create(
                model="late", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Finally, an answer."


# --- request deadline and idle timeout -----------------------------------------------------------


@pytest.fixture(scope="module")
def deadline_server(start_server: StartServer) -> Server:
    return start_server({"request_timeout_seconds": 0.8}, [scripted("slow", "slow.yaml")])


def test_request_deadline(deadline_server: Server) -> None:
    stream = stream_raw(deadline_server.base_url, chat_body("slow", "hi", stream=True))
    error = assert_error_ending(stream, "timeout_error", "timeout")
    assert "timed out" in error["message"]
    assert len(stream.chunks) > 2  # it was streaming when the deadline struck
    assert poll(lambda: metric(deadline_server.base_url, "sluicegate_generations_active", "slow") == 0, 2.0)


def test_request_deadline_sdk(deadline_server: Server) -> None:
    with openai.OpenAI(base_url=deadline_server.api_url, api_key="x", max_retries=0) as sdk:
        stream = sdk.chat.completions.create(
            model="slow", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            for _ in stream:
                pass
    assert caught.value.type == "timeout_error"
    assert caught.value.code == "timeout"


def test_request_deadline_non_streaming(deadline_server: Server) -> None:
    response = httpx.post(
        deadline_server.base_url + "/v1/chat/completions", json=chat_body("slow", "hi"), timeout=10
    )
    assert response.status_code == 504, response.text
    assert response.json()["error"]["type"] == "timeout_error"
    assert response.json()["error"]["code"] == "timeout"


@pytest.fixture(scope="module")
def idle_server(start_server: StartServer) -> Server:
    # Heartbeats every 0.1s must not keep an idle stream alive past 0.5s.
    return start_server(
        {"idle_timeout_seconds": 0.5, "heartbeat_seconds": 0.1}, [scripted("sluggish", "sluggish.yaml")]
    )


def test_idle_timeout(idle_server: Server) -> None:
    stream = stream_raw(idle_server.base_url, chat_body("sluggish", "hi", stream=True))
    error = assert_error_ending(stream, "stream_idle_timeout", "stream_idle_timeout")
    assert "idle_timeout_seconds" in error["message"]
    # The first word was delivered, then silence filled only by heartbeats, then the timeout.
    assert [c["choices"][0]["delta"].get("content") for c in stream.chunks] == ["", "First"]
    kinds = ["heartbeat" if f.is_heartbeat else "other" for f in stream.frames]
    last_chunk = max(
        i for i, f in enumerate(stream.frames) if f.data is not None and f.event is None and not f.is_done
    )
    assert "heartbeat" in kinds[last_chunk:], "heartbeats should have been sent while idle"


def test_idle_timeout_sdk(idle_server: Server) -> None:
    with openai.OpenAI(base_url=idle_server.api_url, api_key="x", max_retries=0) as sdk:
        stream = sdk.chat.completions.create(
            model="sluggish", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = ""
        with pytest.raises(openai.APIError) as caught:
            for chunk in stream:
                text += chunk.choices[0].delta.content or ""
    assert text == "First"
    assert caught.value.type == "stream_idle_timeout"
    assert caught.value.code == "stream_idle_timeout"


# --- reasoning field name -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning", "both"])
def test_reasoning_field_setting(start_server: StartServer, field: str) -> None:
    server = start_server(
        models=[scripted("chat", "chat.yaml")], tables={"chat_completions": {"reasoning_field": field}}
    )
    keys = {"reasoning"} if field == "reasoning" else {"reasoning", "reasoning_content"}
    chunks = stream_raw(server.base_url, chat_body("chat", "think hard", stream=True)).chunks
    reasoning_deltas = [
        c["choices"][0]["delta"]
        for c in chunks
        if set(c["choices"][0]["delta"]) & {"reasoning", "reasoning_content"}
    ]
    assert reasoning_deltas and all(set(d) == keys for d in reasoning_deltas)
    whole = httpx.post(
        server.base_url + "/v1/chat/completions", json=chat_body("chat", "think hard"), timeout=10
    )
    message = whole.json()["choices"][0]["message"]
    for key in keys:
        assert (
            "".join(d[key] for d in reasoning_deltas)
            == message[key]
            == "Let me think about this step by step."
        )
    assert not {"reasoning", "reasoning_content"} - keys & set(message)
    with (
        openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0) as sdk,
        sdk.chat.completions.stream(
            model="chat", messages=[{"role": "user", "content": "think hard"}]
        ) as stream,
    ):
        extra = stream.get_final_completion().choices[0].message.model_extra or {}
    assert {k: extra.get(k) for k in keys} == dict.fromkeys(keys, "Let me think about this step by step.")
