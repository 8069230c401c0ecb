"""A last assistant message continued, not closed, on the demo GGUF through the official
clients: Chat Completions' `continue_final_message`, Anthropic's prefill, Ollama's chat. The
prompt ends inside the message (fewer tokens than with it closed and a new turn opened), and a
model whose generation prompt opens reasoning answers in the message it continues."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

ASK: Any = {"role": "user", "content": "Name a colour."}
STARTED: Any = {"role": "assistant", "content": "The colour of the sky is"}


def prompt_tokens(sdk: openai.OpenAI, messages: list[Any], **body: Any) -> int:
    completion = sdk.chat.completions.create(
        model="tiny", messages=messages, max_tokens=1, temperature=0, extra_body=body or None
    )
    assert completion.usage is not None
    return completion.usage.prompt_tokens


@pytest.fixture
def sdk(llama_server: Server) -> Any:
    with openai.OpenAI(
        base_url=llama_server.api_url, api_key="unused", max_retries=0, timeout=120.0
    ) as client:
        yield client


def test_chat_completions_continue_final_message(sdk: openai.OpenAI) -> None:
    asked = prompt_tokens(sdk, [ASK])
    closed = prompt_tokens(sdk, [ASK, STARTED])
    continued = prompt_tokens(sdk, [ASK, STARTED], continue_final_message=True)
    assert continued == prompt_tokens(sdk, [ASK, STARTED], add_generation_prompt=False)  # vLLM's way
    # The message's text after the generation prompt: no end of turn, no second generation prompt.
    assert asked < continued < closed
    with pytest.raises(openai.BadRequestError, match="assistant message"):
        prompt_tokens(sdk, [ASK], continue_final_message=True)


def test_a_continued_message_is_answered_in_not_reasoned_about(sdk: openai.OpenAI) -> None:
    """tiny-think's generation prompt opens <think>: a continued message closes it first."""
    fresh = sdk.chat.completions.create(model="tiny-think", messages=[ASK], max_tokens=8, seed=1)
    assert (fresh.choices[0].message.model_extra or {}).get("reasoning_content")
    assert not fresh.choices[0].message.content
    continued = sdk.chat.completions.create(
        model="tiny-think",
        messages=[ASK, STARTED],
        max_tokens=8,
        seed=1,
        extra_body={"continue_final_message": True},
    )
    message = continued.choices[0].message
    assert message.content and not (message.model_extra or {}).get("reasoning_content")


def test_anthropic_prefill(llama_server: Server, sdk: openai.OpenAI) -> None:
    with anthropic.Anthropic(base_url=llama_server.base_url, api_key="unused", max_retries=0) as client:

        def input_tokens(messages: list[Any]) -> int:
            usage = client.messages.create(model="tiny", messages=messages, max_tokens=1).usage
            return usage.input_tokens + (usage.cache_read_input_tokens or 0)  # (a cache hit is not input)

        assert input_tokens([ASK, STARTED]) == prompt_tokens(sdk, [ASK, STARTED], continue_final_message=True)
        with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
            input_tokens([ASK, {"role": "assistant", "content": "The colour is "}])


def test_ollama_continues_the_last_assistant_message(llama_server: Server, sdk: openai.OpenAI) -> None:
    import ollama

    client = ollama.Client(host=llama_server.base_url)
    # The same prompt as a continued Chat Completions message, not the closed one.
    reply = client.chat(model="tiny", messages=[ASK, STARTED], options={"num_predict": 1, "num_ctx": 2048})
    continued = prompt_tokens(sdk, [ASK, STARTED], continue_final_message=True)
    assert reply.prompt_eval_count is not None and reply.prompt_eval_count == continued
    assert reply.prompt_eval_count != prompt_tokens(sdk, [ASK, STARTED])
