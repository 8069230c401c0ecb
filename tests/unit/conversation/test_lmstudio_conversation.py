"""The messages a continued `/api/v1/chat` turn gives the engine.

The scripted engine cannot see where a system message sits, so this is checked here: a system
prompt sent again replaces the earlier one *at the start* of the chat. Chat templates (Gemma,
Qwen, Mistral, ...) refuse a system message in the middle of a chat; that is the error behind
LM Studio's own 500 for this request (bug-tracker#2219).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sluicegate.conversation.messages import items_to_messages
from sluicegate.conversation.resolve import Resolved, resolve
from sluicegate.core.errors import SluicegateError
from sluicegate.dialects.lmstudio.dialect import LMStudioDialect

PREVIOUS = "resp_" + "a" * 48


def message(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


class Store:
    """The part of the store `resolve` reads, scoped like the real one (one scope here)."""

    def __init__(self, conversation: list[dict[str, Any]]) -> None:
        self.conversation = conversation

    async def get(self, response_id: str, *, scope: str = "", events: bool = True) -> Any:
        return SimpleNamespace(conversation=self.conversation) if response_id == PREVIOUS else None

    async def run_in_flight(self, response_id: str, *, scope: str = "") -> bool:
        return False

    async def find_item(self, item_id: str, *, scope: str = "") -> Any:
        return None

    async def find_call(self, call_id: str, *, scope: str = "") -> Any:
        return None


async def _conversation(store: Store, body: dict[str, Any]) -> Resolved:
    """What the turn runner resolves for an LM Studio chat turn."""
    turn = LMStudioDialect().parse(body, {}, {})
    assert turn.conversation is not None
    return await resolve(store, turn.conversation, lambda _: False)  # type: ignore[arg-type]


def state(conversation: list[dict[str, Any]]) -> Store:
    return Store(conversation)


STORED = [
    message("system", "You are terse."),
    message("user", "My name is Ada."),
    {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "A greeting."}]},
    message("assistant", "Nice to meet you, Ada."),
]


async def roles_and_texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    conversation = await _conversation(state(STORED), body)
    return [(m.role, m.text) for m in items_to_messages(conversation.history, None)]


async def test_a_first_turn_is_system_then_user() -> None:
    conversation = await _conversation(state([]), {"model": "m", "input": "Hi.", "system_prompt": "Be kind."})
    messages = items_to_messages(conversation.history, None)
    assert [(m.role, m.text) for m in messages] == [("system", "Be kind."), ("user", "Hi.")]
    assert [i["role"] for i in conversation.input_items] == ["system", "user"]


async def test_a_continued_chat_keeps_its_history_and_system_prompt() -> None:
    body = {"model": "m", "input": "What is my name?", "previous_response_id": PREVIOUS}
    assert await roles_and_texts(body) == [
        ("system", "You are terse."),
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]


async def test_a_system_prompt_sent_again_replaces_the_old_one_at_the_start() -> None:
    body = {
        "model": "m",
        "input": "What is my name?",
        "previous_response_id": PREVIOUS,
        "system_prompt": "You are chatty.",
    }
    assert await roles_and_texts(body) == [
        ("system", "You are chatty."),
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]
    conversation = await _conversation(state(STORED), body)
    assert [i["role"] for i in conversation.input_items] == ["system", "user"]  # this turn's own input


async def test_an_unknown_previous_response_is_not_found() -> None:
    body = {"model": "m", "input": "Hi.", "previous_response_id": "resp_" + "0" * 48}
    with pytest.raises(SluicegateError) as caught:
        await _conversation(state(STORED), body)
    assert caught.value.info.status == 404
    assert caught.value.info.param == "previous_response_id"
    assert "resp_" + "0" * 48 in caught.value.info.message
