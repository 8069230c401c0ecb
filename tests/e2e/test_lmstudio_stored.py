"""Stored LM Studio chats: `response_id`, `previous_response_id`, and the store shared with
`/v1/responses` (driven here with the official `openai` SDK).

The scripted engine counts a prompt as its words plus four per message, so `input_tokens` says
exactly which messages the model was given: that is how these tests see the history.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import Server
from lmstudio_support import (
    GREETING,
    HELLO,
    RECALL,
    RESPONSE_ID,
    assert_lmstudio_error,
    chat_body,
    lms,
    lms_server,
    post_chat,
    stream_chat,
)

from sluicegate.engines.scripted import words

pytestmark = pytest.mark.e2e
__all__ = ["lms", "lms_server"]  # fixtures

NAME = "My name is Ada."
QUESTION = "What is my name?"


def prompt_cost(*texts: str) -> int:
    """What the scripted engine counts for a prompt of these messages."""
    return sum(len(words(text)) + 4 for text in texts)


def turn(client: httpx.Client, text: str, previous: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "lms-chat", "input": text, **extra}
    if previous is not None:
        body["previous_response_id"] = previous
    return chat_body(client, body)


@pytest.fixture
def sdk(lms_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=lms_server.api_url, api_key="unused", max_retries=0, timeout=30.0) as client:
        yield client


def test_a_stored_chat_has_a_response_id_and_an_unstored_one_has_none(lms: httpx.Client) -> None:
    stored = turn(lms, "Hi.")
    assert RESPONSE_ID.match(stored["response_id"])
    assert RESPONSE_ID.match(turn(lms, "Hi.", store=True)["response_id"])
    streamed = stream_chat(lms, {"model": "lms-chat", "input": "Hi."}).result
    assert RESPONSE_ID.match(streamed["response_id"])
    assert len({stored["response_id"], streamed["response_id"]}) == 2

    unstored = turn(lms, "Hi.", store=False)
    assert "response_id" not in unstored
    assert unstored["output"] == [{"type": "message", "content": HELLO}]
    assert "response_id" not in stream_chat(lms, {"model": "lms-chat", "input": "Hi.", "store": False}).result


def test_previous_response_id_continues_the_chat(lms: httpx.Client) -> None:
    first = turn(lms, NAME)
    assert first["output"] == [{"type": "message", "content": GREETING}]
    assert first["stats"]["input_tokens"] == prompt_cost(NAME)

    second = turn(lms, QUESTION, first["response_id"])
    assert second["output"] == [{"type": "message", "content": RECALL}]
    assert second["stats"]["input_tokens"] == prompt_cost(NAME, GREETING, QUESTION)

    third = stream_chat(
        lms, {"model": "lms-chat", "input": "Hi.", "previous_response_id": second["response_id"]}
    ).result
    assert third["output"] == [{"type": "message", "content": HELLO}]
    assert third["stats"]["input_tokens"] == prompt_cost(NAME, GREETING, QUESTION, RECALL, "Hi.")

    # A branch: the first turn again, not the latest one.
    branch = turn(lms, QUESTION, first["response_id"])
    assert branch["stats"]["input_tokens"] == second["stats"]["input_tokens"]
    assert branch["response_id"] not in (first["response_id"], second["response_id"])


def test_a_chat_stored_with_store_false_cannot_be_continued(lms: httpx.Client) -> None:
    stored = turn(lms, NAME)
    unstored = turn(lms, QUESTION, stored["response_id"], store=False)
    assert "response_id" not in unstored
    assert unstored["stats"]["input_tokens"] == prompt_cost(NAME, GREETING, QUESTION)


def test_sending_the_system_prompt_again_on_a_continued_chat_works(lms: httpx.Client) -> None:
    """LM Studio answers this with a 500; here the new system prompt replaces the old one."""
    first = turn(lms, NAME, system_prompt="You are terse.")
    assert first["stats"]["input_tokens"] == prompt_cost("You are terse.", NAME)

    second = turn(lms, QUESTION, first["response_id"], system_prompt="You are very chatty today.")
    assert second["output"] == [{"type": "message", "content": RECALL}]
    assert second["stats"]["input_tokens"] == prompt_cost(
        "You are very chatty today.", NAME, GREETING, QUESTION
    )

    streamed = stream_chat(
        lms,
        {
            "model": "lms-chat",
            "input": "Hi.",
            "previous_response_id": second["response_id"],
            "system_prompt": "You are terse.",
        },
    ).result
    assert streamed["stats"]["input_tokens"] == prompt_cost(
        "You are terse.", NAME, GREETING, QUESTION, RECALL, "Hi."
    )

    # Not sent again: the last one stays.
    third = turn(lms, "Hi.", second["response_id"])
    assert third["stats"]["input_tokens"] == prompt_cost(
        "You are very chatty today.", NAME, GREETING, QUESTION, RECALL, "Hi."
    )


@pytest.mark.parametrize("stream", [False, True])
def test_an_unknown_previous_response_id_is_a_404_naming_it(lms: httpx.Client, stream: bool) -> None:
    missing = "resp_" + "0" * 48
    body = {"model": "lms-chat", "input": "Hi.", "previous_response_id": missing, "stream": stream}
    assert_lmstudio_error(
        post_chat(lms, body),
        404,
        code="previous_response_not_found",
        param="previous_response_id",
        mentions=(missing,),
    )


def test_a_previous_response_id_without_the_resp_prefix_is_a_400(lms: httpx.Client) -> None:
    body = {"model": "lms-chat", "input": "Hi.", "previous_response_id": "chat_123"}
    assert_lmstudio_error(post_chat(lms, body), 400, param="previous_response_id", mentions=("resp_",))


def test_a_chat_started_here_continues_through_the_responses_api(
    lms: httpx.Client, sdk: openai.OpenAI
) -> None:
    first = turn(lms, NAME)

    second = sdk.responses.create(model="lms-chat", input=QUESTION, previous_response_id=first["response_id"])
    assert second.output_text == RECALL
    assert second.previous_response_id == first["response_id"]
    assert second.usage is not None
    assert second.usage.input_tokens == prompt_cost(NAME, GREETING, QUESTION)
    assert sdk.responses.retrieve(first["response_id"]).output_text == GREETING

    third = turn(lms, "Hi.", second.id)
    assert third["output"] == [{"type": "message", "content": HELLO}]
    assert third["stats"]["input_tokens"] == prompt_cost(NAME, GREETING, QUESTION, RECALL, "Hi.")


def test_a_responses_api_chat_continues_here(lms: httpx.Client, sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model="lms-chat", input=NAME)
    assert first.output_text == GREETING

    second = turn(lms, QUESTION, first.id)
    assert second["output"] == [{"type": "message", "content": RECALL}]
    assert second["stats"]["input_tokens"] == prompt_cost(NAME, GREETING, QUESTION)
    streamed = stream_chat(
        lms, {"model": "lms-chat", "input": QUESTION, "previous_response_id": first.id}
    ).result
    assert streamed["stats"]["input_tokens"] == second["stats"]["input_tokens"]
