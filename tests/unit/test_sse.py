"""transport/sse.py: EventStreamResponse driven through its ASGI interface with fake receive/send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sluicegate.core.events import Finished, FinishReason, ItemKind, RawEvent, TextDelta
from sluicegate.core.pipeline import StreamLimits, canonical_events, encoded_frames
from sluicegate.dialects.chat_completions import ChatCompletionsEncoder
from sluicegate.transport.sse import HEARTBEAT, EventStreamResponse, sse_frame

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite
SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


class Client:
    """Fake ASGI receive/send: records what was sent; `disconnect()` makes receive report it."""

    def __init__(self, *, fail_on_body: int | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.body_sent = asyncio.Event()
        self._gone = asyncio.Event()
        self._first = True
        self.fail_on_body = fail_on_body

    def disconnect(self) -> None:
        self._gone.set()

    async def receive(self) -> dict[str, Any]:
        if self._first:  # what a server delivers first: the (already read) request body
            self._first = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and self.fail_on_body is not None:
            bodies = sum(m["type"] == "http.response.body" for m in self.sent)
            if bodies >= self.fail_on_body:
                raise OSError("connection reset")
        self.sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            self.body_sent.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def serve(response: EventStreamResponse, client: Client) -> None:
    async with asyncio.timeout(LIMIT):
        await response(SCOPE, client.receive, client.send)


async def frames_of(items: list[bytes], delay: float = 0.0) -> AsyncIterator[bytes]:
    for item in items:
        if delay:
            await asyncio.sleep(delay)
        yield item


def test_sse_frame() -> None:
    assert sse_frame(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert sse_frame(b"{}", event="error") == b"event: error\ndata: {}\n\n"


async def test_frames_ready_with_the_end_go_out_with_it_in_one_message() -> None:
    client = Client()
    await serve(
        EventStreamResponse(frames_of([b"data: 1\n\n", b"data: [DONE]\n\n"]), heartbeat_seconds=15), client
    )
    assert client.sent[1:] == [
        {"type": "http.response.body", "body": b"data: 1\n\ndata: [DONE]\n\n", "more_body": False}
    ]


async def test_headers_first_then_frames_then_end() -> None:
    closed: list[bool] = []
    response = EventStreamResponse(
        frames_of([b"data: 1\n\n", b"", b"data: 2\n\n"]),
        heartbeat_seconds=15,
        headers={"X-Request-ID": "chatcmpl-1"},
        on_close=lambda: closed.append(True),
    )
    client = Client()
    await serve(response, client)
    start = client.sent[0]
    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert headers["connection"] == "keep-alive"
    assert headers["x-request-id"] == "chatcmpl-1"
    assert all(m["type"] == "http.response.body" for m in client.sent[1:])
    assert client.body == b"data: 1\n\ndata: 2\n\n"
    # The body ends exactly once, with the last message (which may carry the last frames).
    assert client.sent[-1]["more_body"] is False
    assert all(m["more_body"] for m in client.sent[1:-1])
    assert closed == [True]
    assert response.client_disconnected is False


async def test_headers_go_out_before_the_first_frame_exists() -> None:
    gate = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        await gate.wait()
        yield b"data: late\n\n"

    client = Client()
    task = asyncio.create_task(serve(EventStreamResponse(frames(), heartbeat_seconds=0), client))
    for _ in range(20):
        await asyncio.sleep(0.01)
        if client.sent:
            break
    assert [m["type"] for m in client.sent] == ["http.response.start"]
    gate.set()
    await task
    assert client.body == b"data: late\n\n"


async def test_heartbeats_while_the_engine_is_silent() -> None:
    async def frames() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.4)
        yield b"data: x\n\n"

    client = Client()
    await serve(EventStreamResponse(frames(), heartbeat_seconds=0.05), client)
    body = client.body
    before, after = body.split(b"data: x\n\n")
    assert after == b""
    # ~8 expected in 0.4s; a loaded machine may deliver fewer, but never none
    assert before.count(HEARTBEAT) >= 2
    assert before == HEARTBEAT * before.count(HEARTBEAT)  # nothing but heartbeats before the data


async def test_no_heartbeats_while_frames_flow() -> None:
    client = Client()
    frames = [f"data: {i}\n\n".encode() for i in range(10)]
    await serve(EventStreamResponse(frames_of(frames, delay=0.01), heartbeat_seconds=5), client)
    assert HEARTBEAT not in client.body
    assert client.body == b"".join(frames)


async def test_heartbeats_disabled_with_zero_interval() -> None:
    async def frames() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.15)
        yield b"data: x\n\n"

    client = Client()
    await serve(EventStreamResponse(frames(), heartbeat_seconds=0), client)
    assert client.body == b"data: x\n\n"


async def test_disconnect_cancels_the_producer_and_runs_on_close() -> None:
    log: list[str] = []
    closed: list[bool] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(30)
            yield b"data: never\n\n"
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    client = Client()
    response = EventStreamResponse(frames(), heartbeat_seconds=15, on_close=lambda: closed.append(True))
    task = asyncio.create_task(serve(response, client))
    await asyncio.wait_for(client.body_sent.wait(), LIMIT)
    client.disconnect()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await task
    assert loop.time() - t0 < 2  # promptly: no waiting for the producer to finish on its own
    assert log == ["cancelled"]
    assert closed == [True]
    assert response.client_disconnected is True
    assert client.body == b"data: 1\n\n"
    assert not any(m.get("more_body") is False for m in client.sent)  # no normal end after a disconnect


async def test_disconnect_before_any_frame_cancels_the_producer() -> None:
    log: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            await asyncio.sleep(30)
            yield b"data: never\n\n"
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    client = Client()
    closed: list[bool] = []
    task = asyncio.create_task(
        serve(
            EventStreamResponse(frames(), heartbeat_seconds=15, on_close=lambda: closed.append(True)), client
        )
    )
    await asyncio.sleep(0.05)
    client.disconnect()
    await task
    assert log == ["cancelled"]
    assert closed == [True]


async def test_write_failure_cancels_the_producer_and_runs_on_close() -> None:
    log: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            for i in range(1000):
                yield f"data: {i}\n\n".encode()
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    client = Client(fail_on_body=1)
    closed: list[bool] = []
    response = EventStreamResponse(frames(), heartbeat_seconds=15, on_close=lambda: closed.append(True))
    await serve(response, client)
    assert log == ["cancelled"]
    assert closed == [True]
    assert len(client.bodies()) == 1


async def test_on_close_runs_when_the_producer_raises() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        raise RuntimeError("encoder bug")

    closed: list[bool] = []
    client = Client()
    await serve(
        EventStreamResponse(frames(), heartbeat_seconds=15, on_close=lambda: closed.append(True)), client
    )
    assert client.body == b"data: 1\n\n"
    assert closed == [True]
    assert client.sent[-1]["more_body"] is False


@pytest.mark.parametrize("silent_engine", [False, True])
async def test_disconnect_cancels_the_engine_through_the_whole_chain(silent_engine: bool) -> None:
    """Client gone → response → encoder frames → segmenter → deadlines → the engine itself."""
    log: list[str] = []
    started = asyncio.Event()

    async def engine() -> AsyncIterator[RawEvent]:
        try:
            if not silent_engine:
                yield TextDelta(ItemKind.MESSAGE, "Hello")
            started.set()
            await asyncio.sleep(30)
            yield Finished(FinishReason.STOP)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        except GeneratorExit:
            log.append("closed")
            raise

    limits = StreamLimits(heartbeat_seconds=0.05, request_timeout_seconds=60, idle_timeout_seconds=60)
    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False)
    frames = encoded_frames(canonical_events(engine(), limits), encoder.encode)
    client = Client()
    task = asyncio.create_task(serve(EventStreamResponse(frames, heartbeat_seconds=0.05), client))
    await asyncio.wait_for(started.wait(), LIMIT)
    await asyncio.wait_for(client.body_sent.wait(), LIMIT)  # a chunk or a heartbeat went out
    client.disconnect()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await task
    assert loop.time() - t0 < 2
    assert log == ["cancelled"]
    body = client.body
    assert b"[DONE]" not in body and b"event: error" not in body
    if silent_engine:
        assert HEARTBEAT in body


async def test_full_chain_normal_end() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "Hi")
        yield Finished(FinishReason.STOP)

    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False)
    frames = encoded_frames(canonical_events(engine(), StreamLimits()), encoder.encode)
    client = Client()
    await serve(EventStreamResponse(frames, heartbeat_seconds=15), client)
    assert client.body.endswith(b"data: [DONE]\n\n")
    assert b'"content":"Hi"' in client.body
    assert client.sent[-1]["more_body"] is False


async def test_full_chain_timeout_ends_with_error_frame() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "Hi")
        await asyncio.sleep(30)
        yield Finished(FinishReason.STOP)  # never reached

    limits = StreamLimits(heartbeat_seconds=15, request_timeout_seconds=None, idle_timeout_seconds=0.1)
    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False)
    frames = encoded_frames(canonical_events(engine(), limits), encoder.encode)
    client = Client()
    await serve(EventStreamResponse(frames, heartbeat_seconds=15), client)
    assert client.body.endswith(
        b'event: error\ndata: {"error":{"message":"No output from the model for 0.1s (idle_timeout_seconds).",'
        b'"type":"stream_idle_timeout","param":null,"code":"stream_idle_timeout"}}\n\ndata: [DONE]\n\n'
    )


async def test_heartbeats_do_not_reset_the_idle_timeout() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        await asyncio.sleep(30)
        yield Finished(FinishReason.STOP)  # never reached

    limits = StreamLimits(heartbeat_seconds=0.02, request_timeout_seconds=None, idle_timeout_seconds=0.25)
    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False)
    frames = encoded_frames(canonical_events(engine(), limits), encoder.encode)
    client = Client()
    await serve(EventStreamResponse(frames, heartbeat_seconds=0.02), client)
    body = client.body
    assert body.count(HEARTBEAT) >= 2  # heartbeats went out while waiting ...
    assert b'"type":"stream_idle_timeout"' in body  # ... and the idle timeout still fired
    assert body.endswith(b"data: [DONE]\n\n")
