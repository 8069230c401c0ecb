"""Records written before our own conversation items (Responses items in `input_items` and
`conversation`, stored form version 1) are still read: continued by Responses and LM Studio,
their items found by id and call_id, their input items listed exactly as they were sent.
Both backends, records put the way the previous code put them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from redis_support import RedisServer, redis_server
from sluicegate.conversation.record import stored_turn
from sluicegate.conversation.resolve import resolve
from sluicegate.core.items import ConversationInput, items_from_json
from sluicegate.dialects.lmstudio.dialect import LMStudioDialect
from sluicegate.dialects.responses.conversation import from_items, to_item, to_items
from sluicegate.store.base import Store, StoredResponse
from sluicegate.store.sqlite import SQLiteStore

Json = dict[str, Any]
OLD = "resp_old"
USER = {
    "type": "message",
    "id": "msg_u1",
    "role": "user",
    "content": [{"type": "input_text", "text": "Weather in Oslo?"}],
    "status": "completed",
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"Oslo"}',
    "status": "completed",
}
RESULT = {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "snow"}
ANSWER = {
    "type": "message",
    "id": "msg_a1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It snows.", "annotations": []}],
}


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        db: Store = SQLiteStore(tmp_path / "store.sqlite3")
    else:
        from sluicegate.store.redis import RedisStore

        server: RedisServer = request.getfixturevalue("shared_redis")
        db = RedisStore(server.url, prefix=f"old{tmp_path.name[-12:]}:")
    await db.start()
    now = time.time()
    # The previous code's record: Responses items everywhere.
    await db.put(
        StoredResponse(
            OLD,
            {"id": OLD, "object": "response", "status": "completed", "output": [CALL, RESULT, ANSWER]},
            [USER],
            [USER, CALL, RESULT, ANSWER],
            now,
            now + 600,
        )
    )
    db.read_item = to_item  # as the wiring sets it
    yield db
    await db.aclose()


def texts(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


async def test_a_responses_turn_continues_an_old_record(store: Store) -> None:
    later = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And now?"}]}
    conv = ConversationInput(input_items=to_items([later]), previous_response_id=OLD)
    resolved = await resolve(store, conv, lambda _: False)
    assert texts(resolved.messages) == [
        ("user", "Weather in Oslo?"),
        ("assistant", ""),
        ("tool", "snow"),
        ("assistant", "It snows."),
        ("user", "And now?"),
    ]
    assert resolved.messages[1].tool_calls[0].name == "get_weather"
    # The new record is in our own form, and its old items come back exactly as they were.
    record = stored_turn({"id": "resp_new", "output": []}, resolved, 600, store)
    assert all("kind" in item for item in record.conversation)
    assert from_items(items_from_json(record.conversation))[:4] == [USER, CALL, RESULT, ANSWER]


async def test_an_lmstudio_chat_continues_an_old_record(store: Store) -> None:
    turn = LMStudioDialect().parse({"model": "m", "input": "And now?", "previous_response_id": OLD}, {}, {})
    assert turn.conversation is not None
    resolved = await resolve(store, turn.conversation, lambda _: False)
    assert texts(resolved.messages)[-2:] == [("assistant", "It snows."), ("user", "And now?")]


async def test_old_items_are_found_by_id_and_call_id_and_listed_as_sent(store: Store) -> None:
    reference = {"type": "item_reference", "id": "msg_u1"}
    orphan = {"type": "function_call_output", "call_id": "call_1", "output": "rain"}
    conv = ConversationInput(input_items=to_items([reference, orphan]))
    resolved = await resolve(store, conv, lambda _: False)
    assert texts(resolved.messages) == [("user", "Weather in Oslo?"), ("assistant", ""), ("tool", "rain")]
    assert resolved.messages[1].tool_calls[0].arguments == '{"city":"Oslo"}'  # the stored call
    listed = await store.input_items(OLD)
    assert listed is not None and from_items(items_from_json(listed, store.read_item)) == [USER]


async def test_without_the_reader_an_old_record_has_no_items(store: Store) -> None:
    """What the tests above rely on: the old items are read by `read_item`, nothing else."""
    store.read_item = None
    record = await store.get(OLD, events=False)
    assert record is not None and items_from_json(record.conversation, store.read_item) == []
