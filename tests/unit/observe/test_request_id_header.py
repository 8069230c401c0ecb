"""observe/requests.py: the observer learns the response's request id from its head, in any case
of the name, without lowercasing every other name to find it."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.observe import requests
from sluicegate.observe.requests import ObserveMiddleware, RequestObserver


async def _request_id_after(headers: list[tuple[bytes, bytes]]) -> str:
    seen: list[RequestObserver] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        observer = requests.current()
        assert observer is not None
        seen.append(observer)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    await _observed(app)
    return seen[0].request_id


async def _observed(app: Any) -> None:
    """`app` served through the middleware for one chat request whose client reads nothing."""

    async def send(message: Any) -> None:
        pass

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
    await ObserveMiddleware(app)(scope, receive, send)


@pytest.mark.parametrize("name", [b"x-request-id", b"X-Request-ID", b"X-REQUEST-ID"])
async def test_the_request_id_is_read_from_the_head_in_any_case(name: bytes) -> None:
    headers = [(b"content-type", b"text/event-stream"), (name, b"chatcmpl-7"), (b"date", b"x")]
    assert await _request_id_after(headers) == "chatcmpl-7"


@pytest.mark.parametrize("name", [b"x-request-ix", b"request-id", b"x-request-id-2"])
async def test_another_name_leaves_the_observers_own_id(name: bytes) -> None:
    request_id = await _request_id_after([(name, b"chatcmpl-7")])
    assert request_id.startswith("req_")


async def test_a_held_stream_keeps_no_closure_and_no_prompt_log_lists() -> None:
    """What each open stream holds for its life (bench/README.md, gateway "Round fifteen"): the
    app's `send` is a slotted object, not a closure over the middleware's cells, and without
    --log-prompts the observer keeps no lists for the text it would log."""
    sends: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        sends.append(send)
        await send({"type": "http.response.start", "status": 201, "headers": []})

    await _observed(app)
    assert getattr(sends[0], "__closure__", None) is None
    code = getattr(ObserveMiddleware.__call__, "__code__", None)  # (None compiled: no frame)
    assert code is None or not code.co_cellvars
    assert not hasattr(sends[0], "__dict__")
    assert RequestObserver("x").request_text is None and RequestObserver("x").answer_text is None
    logged = RequestObserver("x", log_text=True)
    assert logged.request_text == [] and logged.answer_text == []
