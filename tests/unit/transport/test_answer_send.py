"""transport/answer_send.py: the runner's `send` remembers the response's start and status, and
is compiled with the stream transport that awaits it (no interpreted frame between the two)."""

from __future__ import annotations

from typing import Any

from sluicegate import _compiled
from sluicegate.transport.answer_send import AnswerSend


async def test_the_start_and_its_status_are_remembered_and_every_message_passed_on() -> None:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    answer = AnswerSend(send)
    assert (answer.started, answer.status) == (False, 0)
    head = {"type": "http.response.start", "status": 404, "headers": []}
    body = {"type": "http.response.body", "body": b"x"}
    await answer(head)
    await answer(body)
    assert (answer.started, answer.status) == (True, 404)
    assert sent == [head, body]


def test_it_is_compiled_with_the_stream_transport() -> None:
    assert "sluicegate.transport.answer_send" in _compiled.COMPILED
    assert "sluicegate.transport.stream" in _compiled.COMPILED
