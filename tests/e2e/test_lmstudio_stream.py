"""`POST /api/v1/chat` over the raw wire: named events in order, their payloads, `chat.end`.

Every stream read with `stream_chat` goes through the event-order state machine and the
payload checks of `lmstudio_support`; the tests here add what each scenario must show.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from lmstudio_support import (
    FAIL_MESSAGE,
    FAIL_WORDS,
    HELLO,
    JIT_CONTENT,
    JIT_LOAD_SECONDS,
    JIT_REASONING,
    REFUSAL,
    RESPONSE_ID,
    THINK_CONTENT,
    THINK_REASONING,
    LMStream,
    assert_lmstudio_error,
    chat_body,
    comparable,
    lms,
    lms_server,
    parse_stream,
    post_chat,
    stream_chat,
)

pytestmark = pytest.mark.e2e
__all__ = ["lms", "lms_server"]  # fixtures


def prompt_phase(stream: LMStream) -> list[str]:
    return [n for n in stream.names if n.startswith("prompt_processing.")]


def test_a_reasoning_answer_streams_every_event_in_order(lms: httpx.Client) -> None:
    stream = stream_chat(lms, {"model": "lms-chat", "input": "Please think about it."})

    names = stream.names
    reasoning_words = len(THINK_REASONING.split())
    content_words = len(THINK_CONTENT.split())
    progress_count = names.count("prompt_processing.progress")
    assert progress_count >= 1
    assert names == [
        "chat.start",
        "prompt_processing.start",
        *["prompt_processing.progress"] * progress_count,
        "prompt_processing.end",
        "reasoning.start",
        *["reasoning.delta"] * reasoning_words,
        "reasoning.end",
        "message.start",
        *["message.delta"] * content_words,
        "message.end",
        "chat.end",
    ]
    assert stream.of("chat.start") == [{"type": "chat.start", "model_instance_id": "lms-chat"}]
    assert stream.of("prompt_processing.progress")[-1]["progress"] == 1.0
    assert stream.text("reasoning") == THINK_REASONING
    assert stream.text("message") == THINK_CONTENT
    result = stream.result
    assert result["model_instance_id"] == "lms-chat"
    assert result["output"] == [
        {"type": "reasoning", "content": THINK_REASONING},
        {"type": "message", "content": THINK_CONTENT},
    ]
    stats = result["stats"]
    assert stats["total_output_tokens"] == reasoning_words + content_words
    assert stats["reasoning_output_tokens"] == reasoning_words
    assert stats["input_tokens"] > 0
    assert RESPONSE_ID.match(result["response_id"])
    assert stream.response.headers["x-sluicegate-instance"] == "lms-chat"


@pytest.mark.parametrize(
    ("text", "extra"),
    [
        ("Please think about it.", {}),
        ("Please think about it.", {"reasoning": "off"}),
        ("Just say hello.", {"store": False}),
        ("Open the browser for me.", {}),
        ("Show me everything.", {}),
        ("Tell me a secret.", {"system_prompt": "You keep secrets."}),
        ("Please think, briefly.", {"max_output_tokens": 4}),
    ],
)
def test_chat_end_result_equals_the_non_streaming_body(
    lms: httpx.Client, text: str, extra: dict[str, Any]
) -> None:
    body = {"model": "lms-chat", "input": text, **extra}
    streamed = stream_chat(lms, body).result
    plain = chat_body(lms, body)

    assert comparable(streamed) == comparable(plain)
    assert plain["output"], plain
    for key in ("input_tokens", "total_output_tokens", "reasoning_output_tokens"):
        assert streamed["stats"][key] == plain["stats"][key]
    if extra.get("store") is False:
        assert "response_id" not in streamed and "response_id" not in plain
    else:
        assert RESPONSE_ID.match(streamed["response_id"]) and RESPONSE_ID.match(plain["response_id"])
        assert streamed["response_id"] != plain["response_id"]


def test_max_output_tokens_cuts_the_answer(lms: httpx.Client) -> None:
    result = stream_chat(lms, {"model": "lms-chat", "input": "Think!", "max_output_tokens": 4}).result

    assert result["output"] == [{"type": "reasoning", "content": " ".join(THINK_REASONING.split()[:4])}]
    assert result["stats"]["total_output_tokens"] == 4


def test_reasoning_off_drops_the_reasoning(lms: httpx.Client) -> None:
    body = {"model": "lms-chat", "input": "Please think about it."}
    on = stream_chat(lms, {**body, "reasoning": "on"})
    off = stream_chat(lms, {**body, "reasoning": "off"})

    assert "reasoning.start" in on.names  # the script does reason when allowed to
    assert not [n for n in off.names if n.startswith("reasoning.")]
    assert off.result["output"] == [{"type": "message", "content": THINK_CONTENT}]
    assert off.result["stats"]["reasoning_output_tokens"] == 0
    plain = chat_body(lms, {**body, "reasoning": "off"})
    assert plain["output"] == [{"type": "message", "content": THINK_CONTENT}]
    assert plain["stats"]["reasoning_output_tokens"] == 0


def test_a_refusal_is_a_message(lms: httpx.Client) -> None:
    stream = stream_chat(lms, {"model": "lms-chat", "input": "Tell me a secret."})

    assert stream.result["output"] == [{"type": "message", "content": REFUSAL}]


def test_an_engine_error_is_an_error_event_then_chat_end_with_what_was_generated(
    lms: httpx.Client,
) -> None:
    stream = stream_chat(lms, {"model": "lms-chat", "input": "This will fail."})

    # the message cut off by the error is not ended: straight to the error ending
    assert stream.names[-3:] == ["message.delta", "error", "chat.end"]
    assert [d["content"] for d in stream.of("message.delta")] == FAIL_WORDS
    assert stream.error == {"type": "internal_error", "message": FAIL_MESSAGE, "code": "scripted_failure"}
    result = stream.result
    assert result["output"] == [{"type": "message", "content": "".join(FAIL_WORDS)}]
    assert result["stats"]["total_output_tokens"] == len(FAIL_WORDS)
    assert RESPONSE_ID.match(result["response_id"])

    plain = post_chat(lms, {"model": "lms-chat", "input": "This will fail."})
    assert_lmstudio_error(
        plain, 500, type="internal_error", code="scripted_failure", mentions=(FAIL_MESSAGE,)
    )


def test_load_events_only_on_the_request_that_loads_the_model(lms: httpx.Client) -> None:
    body = {"model": "lms-jit-stream", "input": "Hello?"}
    first = stream_chat(lms, body)

    loads = [n for n in first.names if n.startswith("model_load.")]
    assert first.names[: len(loads) + 1] == ["chat.start", *loads]
    assert loads[0] == "model_load.start" and loads[-1] == "model_load.end"
    progress = [d["progress"] for d in first.of("model_load.progress")]
    assert len(progress) >= 2 and progress[-1] == 1.0
    (start,) = first.of("model_load.start")
    assert start == {"type": "model_load.start", "model_instance_id": "lms-jit-stream"}
    (end,) = first.of("model_load.end")
    assert end["model_instance_id"] == "lms-jit-stream"
    assert JIT_LOAD_SECONDS * 0.75 <= end["load_time_seconds"] < 30
    assert first.result["stats"]["model_load_time_seconds"] == end["load_time_seconds"]
    assert first.result["output"] == [
        {"type": "reasoning", "content": JIT_REASONING},
        {"type": "message", "content": JIT_CONTENT},
    ]
    # first_token_delay_ms drives prompt progress: start, several steps up to 1, end.
    prompt = [d["progress"] for d in first.of("prompt_processing.progress")]
    assert len(prompt) >= 2 and prompt[-1] == 1.0

    second = stream_chat(lms, body)
    assert not [n for n in second.names if n.startswith("model_load.")]
    assert "model_load_time_seconds" not in second.result["stats"]
    assert prompt_phase(second)[0] == "prompt_processing.start" == second.names[1]
    assert comparable(second.result)["output"] == first.result["output"]


def test_model_load_time_is_reported_only_by_the_loading_request(lms: httpx.Client) -> None:
    body = {"model": "lms-jit-plain", "input": "Hello?"}
    first = chat_body(lms, body)
    second = chat_body(lms, body)

    assert JIT_LOAD_SECONDS * 0.75 <= first["stats"]["model_load_time_seconds"] < 30
    assert "model_load_time_seconds" not in second["stats"]
    assert comparable(first)["output"] == comparable(second)["output"]


def test_a_request_arriving_during_another_ones_load_sees_no_load_events(
    lms: httpx.Client, lms_server: Any
) -> None:
    """Only the request that starts a load reports it; a second one waits for it quietly."""
    body = {"model": "lms-jit-shared", "input": "Hello?", "stream": True}
    second: dict[str, Any] = {}

    def send_second() -> None:
        with httpx.Client(base_url=lms_server.base_url, timeout=30.0) as other:
            second["stream"] = stream_chat(other, body)

    with lms.stream("POST", "/api/v1/chat", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        head = []
        for line in lines:  # up to the first load event: the load has begun
            head.append(line)
            if line == "event: model_load.start":
                break
        thread = threading.Thread(target=send_second)
        thread.start()
        text = "\n".join([*head, *lines]) + "\n"
    thread.join(30)
    assert not thread.is_alive()

    first = parse_stream(response, text)
    assert first.of("model_load.end") and first.result["stats"]["model_load_time_seconds"] > 0
    stream: LMStream = second["stream"]
    assert not [n for n in stream.names if n.startswith("model_load.")]
    assert "model_load_time_seconds" not in stream.result["stats"]
    assert stream.result["output"] == [{"type": "message", "content": "Loaded at last."}]
    # It really arrived during the 2 s load: it waited for the load before its first token.
    assert stream.result["stats"]["time_to_first_token_seconds"] >= 0.2


def test_the_stream_ends_with_one_chat_end(lms: httpx.Client) -> None:
    stream = stream_chat(lms, {"model": "lms-chat", "input": "Just say hello."})

    assert stream.names.count("chat.end") == 1 and stream.names[-1] == "chat.end"
    assert stream.names.count("chat.start") == 1 and stream.names[0] == "chat.start"
    assert stream.text("message") == HELLO
