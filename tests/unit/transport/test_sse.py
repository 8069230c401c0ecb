"""transport/sse.py: `stream_sse` driven through fake ASGI receive/send, alone and behind the
turn pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.middleware import Middleware
from starlette.routing import Route

from loop_support import settled
from sluicegate.app.factory import SluicegateApp
from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import Finished, FinishReason, ItemKind, RawEvent, TextDelta
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.pipeline import StreamLimits, stream_deadline
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.transport.sse import (
    HEARTBEAT,
    SERVER_SEND,
    StreamOutcome,
    frame_bytes,
    server_send,
    stream_sse,
)
from sluicegate.turn.pipeline import TurnPipeline

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite


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


async def serve(
    chunks: AsyncIterator[Any],
    client: Client,
    *,
    heartbeat_seconds: float,
    headers: dict[str, str] | None = None,
    buffer_bytes: int = 256 * 1024,
) -> StreamOutcome:
    async with asyncio.timeout(LIMIT):
        return await stream_sse(
            chunks,
            client.send,
            client.receive,
            heartbeat_seconds=heartbeat_seconds,
            headers=headers,
            buffer_bytes=buffer_bytes,
        )


def chat_frames(engine: AsyncIterator[RawEvent], limits: StreamLimits) -> AsyncIterator[list[Frame]]:
    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False)
    return TurnPipeline(engine, encoder, Accumulator(), deadline=stream_deadline(limits)).frames()


async def frames_of(items: list[bytes], delay: float = 0.0) -> AsyncIterator[bytes]:
    for item in items:
        if delay:
            await asyncio.sleep(delay)
        yield item


def test_frame_bytes_is_the_one_place_sse_is_written() -> None:
    assert frame_bytes(Frame(b'{"a":1}')) == b'data: {"a":1}\n\n'
    assert frame_bytes(Frame(b"{}", "error")) == b"event: error\ndata: {}\n\n"
    assert frame_bytes(DONE) == b"data: [DONE]\n\n"


async def test_frames_ready_with_the_end_go_out_with_it_in_one_message() -> None:
    client = Client()
    await serve(frames_of([b"data: 1\n\n", b"data: [DONE]\n\n"]), client, heartbeat_seconds=15)
    assert client.sent[1:] == [
        {"type": "http.response.body", "body": b"data: 1\n\ndata: [DONE]\n\n", "more_body": False}
    ]


async def test_frame_lists_are_written_as_sse() -> None:
    async def chunks() -> AsyncIterator[list[Frame]]:
        yield [Frame(b'{"a":1}', "one"), Frame(b'{"b":2}')]
        yield []
        yield [DONE]

    client = Client()
    await serve(chunks(), client, heartbeat_seconds=15)
    assert client.body == b'event: one\ndata: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'


async def test_headers_first_then_frames_then_end() -> None:
    client = Client()
    outcome = await serve(
        frames_of([b"data: 1\n\n", b"", b"data: 2\n\n"]),
        client,
        heartbeat_seconds=15,
        headers={"X-Request-ID": "chatcmpl-1"},
    )
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
    assert outcome == StreamOutcome(finished=True, client_gone=False)


async def test_headers_go_out_before_the_first_frame_exists() -> None:
    gate = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        await gate.wait()
        yield b"data: late\n\n"

    client = Client()
    task = asyncio.create_task(serve(frames(), client, heartbeat_seconds=0))
    await settled()  # the producer waits on its gate: whatever goes out without a frame has gone
    assert [m["type"] for m in client.sent] == ["http.response.start"]
    gate.set()
    await task
    assert client.body == b"data: late\n\n"


async def test_heartbeats_while_the_engine_is_silent() -> None:
    async def frames() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.4)
        yield b"data: x\n\n"

    client = Client()
    await serve(frames(), client, heartbeat_seconds=0.05)
    body = client.body
    before, after = body.split(b"data: x\n\n")
    assert after == b""
    # ~8 expected in 0.4s; a loaded machine may deliver fewer, but never none
    assert before.count(HEARTBEAT) >= 2
    assert before == HEARTBEAT * before.count(HEARTBEAT)  # nothing but heartbeats before the data


async def test_no_heartbeats_while_frames_flow() -> None:
    client = Client()
    frames = [f"data: {i}\n\n".encode() for i in range(10)]
    await serve(frames_of(frames, delay=0.01), client, heartbeat_seconds=5)
    assert HEARTBEAT not in client.body
    assert client.body == b"".join(frames)


async def test_heartbeats_disabled_with_zero_interval() -> None:
    async def frames() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.15)
        yield b"data: x\n\n"

    client = Client()
    await serve(frames(), client, heartbeat_seconds=0)
    assert client.body == b"data: x\n\n"


async def test_disconnect_cancels_the_producer() -> None:
    log: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(30)
            yield b"data: never\n\n"
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    client = Client()
    task = asyncio.create_task(serve(frames(), client, heartbeat_seconds=15))
    await asyncio.wait_for(client.body_sent.wait(), LIMIT)
    client.disconnect()
    outcome = await task
    assert log == ["cancelled"]  # the stream returned only after the producer was cancelled
    assert outcome == StreamOutcome(finished=False, client_gone=True)
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
    task = asyncio.create_task(serve(frames(), client, heartbeat_seconds=15))
    await settled()  # the producer is inside its sleep, the transport waits on it
    assert log == [] and not task.done()
    client.disconnect()
    outcome = await task
    assert log == ["cancelled"]
    assert outcome.client_gone


async def test_write_failure_cancels_the_producer() -> None:
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
    outcome = await serve(frames(), client, heartbeat_seconds=15)
    assert log == ["cancelled"]
    assert outcome.client_gone
    assert len(client.bodies()) == 1


async def test_the_stream_ends_when_the_producer_raises() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        raise RuntimeError("encoder bug")

    client = Client()
    await serve(frames(), client, heartbeat_seconds=15)
    assert client.body == b"data: 1\n\n"
    assert client.sent[-1]["more_body"] is False


class StalledClient(Client):
    """A client that stops reading: the first body write does not complete, as uvicorn's `send`
    waits while the socket's write buffer is above its high-water mark — until the connection
    is lost, which releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.stalled.set()
            await self._gone.wait()


async def test_a_client_that_stops_reading_stops_the_producer() -> None:
    """Backpressure: while the client reads nothing, the producer is pulled only until the
    outbox holds `buffer_bytes`; it is not drained."""
    produced = 0
    frame = b"data: " + b"x" * 1000 + b"\n\n"

    async def frames() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(100_000):
            produced += 1
            yield frame

    client = StalledClient()
    task = asyncio.create_task(serve(frames(), client, heartbeat_seconds=15, buffer_bytes=16 * 1024))
    await asyncio.wait_for(client.stalled.wait(), LIMIT)
    for _ in range(50):  # let the producer run as far as it can
        await asyncio.sleep(0)
    # One write in flight plus at most one outbox's worth, then the producer waits.
    assert produced <= 2 * (16 * 1024 // len(frame)) + 3
    client.disconnect()
    outcome = await task
    assert outcome.client_gone
    assert produced < 100


@pytest.mark.parametrize("silent_engine", [False, True])
async def test_disconnect_cancels_the_engine_through_the_whole_chain(silent_engine: bool) -> None:
    """Client gone → stream → pipeline frames → segmenter → deadlines → the engine itself."""
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
    client = Client()
    task = asyncio.create_task(serve(chat_frames(engine(), limits), client, heartbeat_seconds=0.05))
    await asyncio.wait_for(started.wait(), LIMIT)
    await asyncio.wait_for(client.body_sent.wait(), LIMIT)  # a chunk or a heartbeat went out
    client.disconnect()
    await task
    assert log == ["cancelled"]
    body = client.body
    assert b"[DONE]" not in body and b"event: error" not in body
    if silent_engine:
        assert HEARTBEAT in body


async def test_full_chain_normal_end() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "Hi")
        yield Finished(FinishReason.STOP)

    client = Client()
    await serve(chat_frames(engine(), StreamLimits()), client, heartbeat_seconds=15)
    assert client.body.endswith(b"data: [DONE]\n\n")
    assert b'"content":"Hi"' in client.body
    assert client.sent[-1]["more_body"] is False


async def test_full_chain_timeout_ends_with_error_frame() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "Hi")
        await asyncio.sleep(30)
        yield Finished(FinishReason.STOP)  # never reached

    limits = StreamLimits(heartbeat_seconds=15, request_timeout_seconds=None, idle_timeout_seconds=0.1)
    client = Client()
    await serve(chat_frames(engine(), limits), client, heartbeat_seconds=15)
    assert client.body.endswith(
        b'event: error\ndata: {"error":{"message":"No output from the model for 0.1s (idle_timeout_seconds).",'
        b'"type":"stream_idle_timeout","param":null,"code":"stream_idle_timeout"}}\n\ndata: [DONE]\n\n'
    )


async def test_heartbeats_do_not_reset_the_idle_timeout() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        await asyncio.sleep(30)
        yield Finished(FinishReason.STOP)  # never reached

    limits = StreamLimits(heartbeat_seconds=0.02, request_timeout_seconds=None, idle_timeout_seconds=0.25)
    client = Client()
    await serve(chat_frames(engine(), limits), client, heartbeat_seconds=0.02)
    body = client.body
    assert body.count(HEARTBEAT) >= 2  # heartbeats went out while waiting ...
    assert b'"type":"stream_idle_timeout"' in body  # ... and the idle timeout still fired
    assert body.endswith(b"data: [DONE]\n\n")


async def test_the_body_goes_to_body_send_once_the_head_went_through_send() -> None:
    head_only, server = Client(), Client()
    outcome = await stream_sse(
        frames_of([b"data: 1\n\n", b"data: 2\n\n"], delay=0.01),
        head_only.send,
        server.receive,
        heartbeat_seconds=15,
        body_send=server.send,
    )
    assert [m["type"] for m in head_only.sent] == ["http.response.start"]
    assert server.body == b"data: 1\n\ndata: 2\n\n"
    assert all(m["type"] == "http.response.body" for m in server.sent)
    assert server.sent[-1]["more_body"] is False
    assert outcome == StreamOutcome(finished=True, client_gone=False)


async def test_stream_bodies_skip_the_middleware_of_a_sluicegate_app() -> None:
    """The app keeps the server's `send` in the scope; a stream's head passes every middleware
    (they note its status), its body frames go straight to the server."""
    seen_by_middleware: list[str] = []

    class Watch:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async def watched(message: dict[str, Any]) -> None:
                seen_by_middleware.append(message["type"])
                await send(message)

            await self.app(scope, receive, watched)

    class Endpoint:  # an ASGI app, as `TurnEndpoint` is
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await stream_sse(
                frames_of([b"data: 1\n\n", b"data: 2\n\n"], delay=0.01),
                send,
                receive,
                heartbeat_seconds=15,
                body_send=server_send(scope, send),
            )

    app = SluicegateApp(routes=[Route("/stream", Endpoint())], middleware=[Middleware(Watch)])
    server = Client()
    scope = {"type": "http", "method": "GET", "path": "/stream", "headers": [], "query_string": b""}
    async with asyncio.timeout(LIMIT):
        await app(scope, server.receive, server.send)
    assert server.sent[0]["type"] == "http.response.start"
    assert server.body == b"data: 1\n\ndata: 2\n\n"
    assert seen_by_middleware == ["http.response.start"]


def test_server_send_falls_back_to_the_send_it_is_given() -> None:
    async def mine(message: Any) -> None: ...

    async def servers(message: Any) -> None: ...

    assert server_send({}, mine) is mine
    assert server_send({SERVER_SEND: servers}, mine) is servers
