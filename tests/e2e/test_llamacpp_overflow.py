"""A conversation longer than the loaded context, in every dialect.

By default: a 400 `context_length_exceeded` naming both numbers, before anything streams (also
when the request itself would load the model). Opted in (per model or per request): the oldest
turns are dropped, the system prompt and the last user turn kept, and the response says how
many messages went (`X-Sluicegate-Context-Truncated`) and shows the trimmed prompt's usage.
An answer that runs into the end of the context finishes with `length`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

SHORT = "tiny-short"  # 256 tokens of context, policy "error"
WINDOW = "tiny-window"  # 256 tokens, policy "rolling_window" from its config
N_CTX = 256
LONG = "Tell me about the weather in Paris, Rome, Berlin and every other city you know. " * 30
TURN = "Please read the file and tell me what it says about the weather today. " * 3
HEADER = "x-sluicegate-context-truncated"


@pytest.fixture
def sdk(llama_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llama_server.api_url, api_key="unused", max_retries=0, timeout=60.0
    ) as client:
        yield client


def _history(turns: int) -> list[Any]:
    messages: list[Any] = [{"role": "system", "content": "You are terse."}]
    for n in range(turns):
        messages += [
            {"role": "user", "content": f"{n}: {TURN}"},
            {"role": "assistant", "content": f"Answer {n}."},
        ]
    return [*messages, {"role": "user", "content": "And now, the last question?"}]


def _names_both_numbers(message: str) -> None:
    numbers = {int(n) for n in re.findall(r"\d+", message)}
    assert N_CTX in numbers and any(n > N_CTX for n in numbers), message


def test_chat_completions_refuses_before_any_byte(sdk: openai.OpenAI) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(
                model=SHORT, messages=[{"role": "user", "content": LONG}], max_tokens=4, stream=stream
            )
        assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"
        _names_both_numbers(caught.value.message)


def test_responses_refuses(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=SHORT, input=LONG, max_output_tokens=16, stream=True)
    assert caught.value.code == "context_length_exceeded"
    _names_both_numbers(caught.value.message)


def test_lmstudio_refuses(llama_server: Server) -> None:
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        reply = client.post("/api/v1/chat", json={"model": SHORT, "input": LONG, "stream": True})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded"
    _names_both_numbers(error["message"])


def test_chat_completions_rolling_window_from_config(sdk: openai.OpenAI) -> None:
    messages = _history(6)
    raw = sdk.chat.completions.with_raw_response.create(model=WINDOW, messages=messages, max_tokens=8)
    completion = raw.parse()
    dropped = int(raw.headers[HEADER])
    assert dropped >= 2 and dropped % 2 == 0  # whole turns: a question with its answer
    assert completion.usage is not None and completion.usage.prompt_tokens <= N_CTX - 8
    assert completion.choices[0].finish_reason == "length"  # the max_tokens asked for, not a cut
    # Without overflow nothing is dropped and no header is sent.
    short = sdk.chat.completions.with_raw_response.create(model=WINDOW, messages=_history(0), max_tokens=4)
    assert HEADER not in short.headers


def test_per_request_policies(sdk: openai.OpenAI) -> None:
    messages = _history(6)
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model=SHORT, messages=messages, max_tokens=8)
    window = sdk.chat.completions.with_raw_response.create(
        model=SHORT, messages=messages, max_tokens=8, extra_body={"context_overflow": "rolling_window"}
    )
    middle = sdk.chat.completions.with_raw_response.create(
        model=SHORT, messages=messages, max_tokens=8, extra_body={"context_overflow": "truncate_middle"}
    )
    assert int(window.headers[HEADER]) >= 2 and int(middle.headers[HEADER]) >= 2
    for raw in (window, middle):
        usage = raw.parse().usage
        assert usage is not None and usage.prompt_tokens <= N_CTX - 8
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model=SHORT, messages=messages, max_tokens=8, extra_body={"context_overflow": "sometimes"}
        )
    assert caught.value.param == "context_overflow"
    # The last user turn alone does not fit: no policy can help.
    with pytest.raises(openai.BadRequestError) as too_long:
        sdk.chat.completions.create(
            model=SHORT,
            messages=[{"role": "user", "content": LONG}],
            extra_body={"context_overflow": "rolling_window"},
        )
    assert too_long.value.code == "context_length_exceeded"


def test_responses_rolling_window(sdk: openai.OpenAI) -> None:
    raw = sdk.responses.with_raw_response.create(
        model=SHORT,
        input=_history(6),
        max_output_tokens=16,
        extra_body={"context_overflow": "rolling_window"},
    )
    response = raw.parse()
    assert int(raw.headers[HEADER]) >= 2
    assert response.usage is not None and response.usage.input_tokens <= N_CTX - 16


def test_lmstudio_rolling_window_over_stored_turns(llama_server: Server) -> None:
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        previous = None
        dropped = []
        for _ in range(5):
            body: dict[str, Any] = {"model": WINDOW, "input": TURN, "max_output_tokens": 12}
            if previous:
                body["previous_response_id"] = previous
            reply = client.post("/api/v1/chat", json=body)
            assert reply.status_code == 200, reply.text
            previous = reply.json()["response_id"]
            dropped.append(int(reply.headers.get(HEADER, "0")))
    assert dropped[0] == 0 and dropped[-1] >= 2


def test_answer_that_reaches_the_end_of_the_context_finishes_with_length(
    sdk: openai.OpenAI, llama_server: Server
) -> None:
    prompt = "Weather? " * 30  # about 170 tokens: under 256, leaving dozens for the answer
    completion = sdk.chat.completions.create(model=SHORT, messages=[{"role": "user", "content": prompt}])
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.total_tokens == N_CTX
    response = sdk.responses.create(model=SHORT, input=prompt)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        result = client.post("/api/v1/chat", json={"model": SHORT, "input": prompt}).json()
    stats = result["stats"]
    assert stats["input_tokens"] + stats["total_output_tokens"] == N_CTX
