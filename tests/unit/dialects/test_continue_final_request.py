"""A last assistant message the reply continues: Chat Completions' `continue_final_message`
(and vLLM's `add_generation_prompt: false`), Anthropic's prefill, Ollama's open last turn."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.dialects.anthropic.request import parse_messages_request
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.ollama.request import parse_chat

ASK = {"role": "user", "content": "Name a colour."}
STARTED = {"role": "assistant", "content": "The colour is"}


def chat(**body: Any) -> Any:
    return parse_chat_request({"model": "m", "messages": [ASK, STARTED], **body})[0]


def test_chat_completions_continue_final_message() -> None:
    assert chat(continue_final_message=True).continue_final
    assert chat(continue_final_message=True, add_generation_prompt=False).continue_final  # vLLM's pair
    assert chat(add_generation_prompt=False).continue_final
    assert not chat().continue_final  # OpenAI's reading: a new assistant message
    assert not chat(continue_final_message=False).continue_final


def test_prefill_assistant_continues_a_last_assistant_message_unless_told_not_to() -> None:
    """`[chat_completions] prefill_assistant` (llama-server's default): a last assistant message
    is a prefill, unless the request asks for a new message; a tool-calling one is not."""

    def prefilled(messages: list[dict[str, Any]], **body: Any) -> bool:
        request = {"model": "m", "messages": messages, **body}
        return parse_chat_request(request, prefill_assistant=True)[0].continue_final

    assert prefilled([ASK, STARTED])
    assert prefilled([ASK, {"role": "assistant", "content": [{"type": "text", "text": "Wh"}]}])
    assert not prefilled([ASK, STARTED], continue_final_message=False, add_generation_prompt=True)
    assert not prefilled([ASK, STARTED], add_generation_prompt=True)
    assert not prefilled([ASK])
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert not prefilled([ASK, {"role": "assistant", "content": None, "tool_calls": [call]}])


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"continue_final_message": True, "add_generation_prompt": True}, "Cannot set both"),
        ({"continue_final_message": True, "messages": [ASK]}, "must be an assistant message"),
        ({"add_generation_prompt": False, "messages": [ASK]}, "must be an assistant message"),
        (
            {
                "continue_final_message": True,
                "messages": [
                    ASK,
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                ],
            },
            "contains tool calls",
        ),
        ({"continue_final_message": "yes"}, "continue_final_message"),
    ],
)
def test_chat_completions_continuation_errors_are_400s(body: dict[str, Any], says: str) -> None:
    with pytest.raises(SluicegateError, match=says) as caught:
        parse_chat_request({"model": "m", "messages": [ASK, STARTED], **body})
    assert caught.value.info.status == 400


def anthropic(messages: list[Any]) -> Any:
    body = {"model": "m", "max_tokens": 10, "messages": messages}
    return parse_messages_request(body, ThinkingSigner(b"k" * 32))[0]


def test_anthropic_prefill_is_continued() -> None:
    assert anthropic([ASK, STARTED]).continue_final
    assert not anthropic([ASK]).continue_final
    with pytest.raises(SluicegateError, match="trailing whitespace"):
        anthropic([ASK, {"role": "assistant", "content": "The colour is "}])


def test_ollama_continues_a_last_assistant_message() -> None:
    assert parse_chat({"model": "m", "messages": [ASK, STARTED]})[0].continue_final
    assert not parse_chat({"model": "m", "messages": [ASK]})[0].continue_final


def test_verbose_default_shows_the_prompt_unless_the_request_says_no() -> None:
    """`[chat_completions] verbose` (llama-server's `--verbose`): `__verbose` by default; a
    request's own `verbose` wins either way."""

    def shown(default: bool, **body: Any) -> bool:
        return parse_chat_request({"model": "m", "messages": [ASK], **body}, verbose=default)[1].verbose

    assert shown(True) and shown(True, verbose=True) and shown(False, verbose=True)
    assert not shown(True, verbose=False) and not shown(False)
