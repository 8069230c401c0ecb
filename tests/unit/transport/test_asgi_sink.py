"""The plain ASGI sink (`transport/asgi_sink.py`): the one write path (`transport/stream.py`)
on a server that gives no sink of its own — a fast lane's frames included, in order with the
task's chunks, and the sink's tasks gone when the stream is."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sluicegate.core.frames import Frame
from sluicegate.transport.asgi_sink import AsgiSink
from sluicegate.transport.sse import SSE
from sluicegate.transport.stream import Emitter, StreamOutcome, stream_chunks

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite


class Client:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        await asyncio.sleep(0)  # a server's send yields to the loop

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


class Binding:
    def __init__(self) -> None:
        self.emitter: Emitter | None = None
        self.bound: list[bool] = []

    def bind(self, emitter: Emitter | None) -> None:
        self.emitter = emitter
        self.bound.append(emitter is not None)


async def test_a_lane_writes_through_the_asgi_sink_between_the_tasks_chunks() -> None:
    client = Client()
    lane = Binding()

    async def chunks() -> AsyncIterator[list[Frame]]:
        yield [Frame(b"1")]
        assert lane.emitter is not None and lane.emitter.ready
        assert lane.emitter.producer is asyncio.current_task()
        lane.emitter.emit(
            [Frame(b"2"), Frame(b"3")], asyncio.get_running_loop().time()
        )  # as the callback would
        await asyncio.sleep(0)
        yield [Frame(b"4")]

    async with asyncio.timeout(LIMIT):
        outcome = await stream_chunks(chunks(), client.send, client.receive, framing=SSE, lane=lane)
    assert outcome == StreamOutcome(finished=True, client_gone=False)
    assert client.body == b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n"
    assert client.sent[-1]["more_body"] is False
    assert lane.bound == [True, False]


async def test_the_sinks_tasks_end_with_the_stream() -> None:
    client = Client()
    before = len(asyncio.all_tasks())

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        client.gone.set()
        await asyncio.sleep(30)  # cancelled by the disconnect
        yield b"never"

    async with asyncio.timeout(LIMIT):
        outcome = await stream_chunks(chunks(), client.send, client.receive, framing=SSE)
    assert outcome.client_gone and not outcome.finished
    assert len(asyncio.all_tasks()) == before


async def test_a_write_refused_while_bytes_wait_then_forced() -> None:
    client = Client()
    sink = AsgiSink(client.send, client.receive)
    assert sink.write(b"a")
    assert not sink.write(b"b")  # the sender has not taken "a" yet: the high-water mark
    assert sink.write(b"b", force=True)
    assert sink.buffered() == 2
    assert await sink.end(True)
    assert client.sent == [{"type": "http.response.body", "body": b"ab", "more_body": False}]


async def test_a_cancel_from_outside_leaves_no_sink_task_behind() -> None:
    client = Client()
    before = asyncio.all_tasks()
    started = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        started.set()
        await asyncio.sleep(30)
        yield b"never"

    task = asyncio.create_task(stream_chunks(chunks(), client.send, client.receive, framing=SSE))
    async with asyncio.timeout(LIMIT):
        await started.wait()
        task.cancel()  # the server's shutdown, not the client leaving
        with pytest.raises(asyncio.CancelledError):
            await task
        while len(asyncio.all_tasks() - before) > 0:  # the sink's tasks end on their own
            await asyncio.sleep(0)
    assert client.body == b"data: 1\n\n"


REQUEST = contextvars.ContextVar("REQUEST", default="none")


async def test_the_sender_runs_in_the_requests_context_when_a_heartbeat_writes_first() -> None:
    """The heartbeat runs on the loop's shared alarm timer (core/alarms.py), in a context of its
    own; when it is the stream's first write, the sink's sender task still runs in the
    request's context, as it does when the stream's task writes first."""
    seen: list[str] = []
    client = Client()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            seen.append(REQUEST.get())
        await client.send(message)

    beat = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        async with asyncio.timeout(LIMIT):
            while b": heartbeat" not in client.body and not seen:
                await asyncio.sleep(0.005)
        beat.set()
        yield b"data: 1\n\n"

    async def request() -> StreamOutcome:
        REQUEST.set("the request")
        return await stream_chunks(chunks(), send, client.receive, framing=SSE, heartbeat_seconds=0.01)

    outcome = await asyncio.create_task(request())
    assert beat.is_set() and outcome.finished
    assert seen and set(seen) == {"the request"}
