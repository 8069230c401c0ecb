"""Reading a request's JSON body: the ASGI messages read directly (no `request.stream()`
generator) and the depth check skipped for a text with too few brackets to nest past the limit;
both must answer exactly as before."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.json_limits import json_depth_exceeds, may_nest_deeper
from sluicegate.turn.http import parse_json, read_json


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def request_of(messages: list[dict[str, Any]], headers: list[tuple[bytes, bytes]] | None = None) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    app = SimpleNamespace(
        state=SimpleNamespace(sluicegate=SimpleNamespace(settings=SimpleNamespace(max_json_depth=64)))
    )
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers or [], "app": app}
    return Request(scope, receive)


async def test_a_body_in_several_messages_is_joined() -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    parts = [body[:5], b"", body[5:20], body[20:]]
    messages = [{"type": "http.request", "body": p, "more_body": True} for p in parts]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    assert await read_json(request_of(messages), 1000) == orjson.loads(body)


async def test_a_body_in_one_message() -> None:
    request = request_of([{"type": "http.request", "body": b'{"a": [1]}'}])  # no more_body: the end
    assert await read_json(request, 1000) == {"a": [1]}


async def test_a_client_gone_mid_body_is_cancelled() -> None:
    request = request_of([{"type": "http.request", "body": b'{"a": ', "more_body": True}])
    with pytest.raises(SluicegateError) as gone:
        await read_json(request, 1000)
    assert gone.value.info.kind is ErrorKind.CANCELLED


async def test_a_body_over_the_limit_is_refused_as_it_arrives() -> None:
    messages = [{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 2
    with pytest.raises(SluicegateError) as refused:
        await read_json(request_of(messages), 1000)
    assert refused.value.info.kind is ErrorKind.PAYLOAD_TOO_LARGE


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    request = request_of([], headers=[(b"content-length", b"5000")])
    with pytest.raises(SluicegateError) as refused:
        await read_json(request, 1000)
    assert refused.value.info.kind is ErrorKind.PAYLOAD_TOO_LARGE


async def test_a_whole_body_over_the_limit_in_one_message_is_refused() -> None:
    """The one-message case (`core/body.py` `whole_body`) keeps the limit the pieces have."""
    request = request_of([{"type": "http.request", "body": b"x" * 1001}])
    with pytest.raises(SluicegateError) as refused:
        await read_json(request, 1000)
    assert refused.value.info.kind is ErrorKind.PAYLOAD_TOO_LARGE


async def test_a_client_gone_before_the_body_is_cancelled() -> None:
    with pytest.raises(SluicegateError) as gone:
        await read_json(request_of([{"type": "http.disconnect"}]), 1000)
    assert gone.value.info.kind is ErrorKind.CANCELLED


async def test_headers_as_lists_and_other_messages_are_read() -> None:
    """ASGI allows a header as a list of two byte strings; a message of another type is skipped."""
    headers: Any = [[b"host", b"x"], [b"content-length", b"10"]]
    messages = [{"type": "http.other"}, {"type": "http.request", "body": b'{"a": [1]}'}]
    assert await read_json(request_of(messages, headers=headers), 1000) == {"a": [1]}


@pytest.mark.parametrize("depth", [0, 1, 5, 63, 64, 65, 66, 200])
@pytest.mark.parametrize("limit", [1, 4, 64])
def test_a_text_that_nests_past_the_limit_is_never_skipped(depth: int, limit: int) -> None:
    text = orjson.dumps(nested(depth))
    if json_depth_exceeds(nested(depth), limit):
        assert may_nest_deeper(text, limit)
        assert may_nest_deeper(text.decode(), limit)


def test_the_depth_limit_holds_with_and_without_the_shortcut() -> None:
    deep = orjson.dumps(nested(65))
    with pytest.raises(SluicegateError) as refused:
        parse_json(deep, 64)
    assert refused.value.info.code == "json_too_deep"
    # Many brackets, shallow: walked, and accepted.
    wide = orjson.dumps({"a": [[1]] * 100, "b": "{[" * 100})
    assert may_nest_deeper(wide, 64)
    assert parse_json(wide, 64)["b"] == "{[" * 100
    # Brackets inside strings count, so they can only make the walk happen, never skip it.
    assert not may_nest_deeper(b'{"a": [1, 2]}', 64)
    assert parse_json(b'{"a": [1, 2]}', 64) == {"a": [1, 2]}
