"""The end of an upstream's body after its last event: when it came with that event (the usual
case) the connection goes back to the pool without waiting for anything; when it comes later,
it is still read (bounded) so the connection is kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sluicegate.core.events import (
    Answered,
    PromptProgress,
    PromptStarted,
    RawBatch,
    RawEvent,
    ReadyEvents,
    TextDelta,
)
from sluicegate.core.request import ChatRequest, Message
from sluicegate.engines.upstream import base
from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def chunk(frame: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(frame), frame)


class Upstream:
    """Answers every request with one token; the body's end with the last event or `later`."""

    def __init__(self, *, later: bool) -> None:
        self.later = later
        self.connections = 0
        self.draining = asyncio.Event()  # set by the engine's drain: the end is written then
        self.open = 0
        self.all_closed = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                writer.write(HEAD + chunk(CHUNK))
                await writer.drain()
                if self.later:
                    writer.write(chunk(FINISH))
                    await writer.drain()
                    await self.draining.wait()  # the terminator comes in a read of its own
                    self.draining.clear()
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(chunk(FINISH) + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.open -= 1
            if not self.open:
                self.all_closed.set()


async def run(engine: OpenAIUpstreamEngine) -> list[RawEvent]:
    events: AsyncIterator[RawEvent] = engine.generate(
        ChatRequest(model="m", messages=[Message("user", "hi")])
    )
    out: list[RawEvent] = []
    async for event in events:
        out += event.events if isinstance(event, RawBatch) else [event]
    return out


@pytest.mark.parametrize("later", [False, True])
async def test_the_connection_is_reused_whenever_the_body_end_comes(
    later: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    drains = 0
    drain = base._drain
    upstream = Upstream(later=later)

    async def counted(chunks: AsyncIterator[bytes]) -> None:
        nonlocal drains
        drains += 1
        upstream.draining.set()
        await drain(chunks)

    monkeypatch.setattr(base, "_drain", counted)
    monkeypatch.setattr(base, "DRAIN_SECONDS", 30.0)  # the end comes once asked for: no race with it
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIUpstreamEngine(
        parse_config({"id": "m", "base_url": f"http://127.0.0.1:{port}/v1"}, env={})
    )
    try:
        for _ in range(3):
            events = await run(engine)
            assert [e.text for e in events if isinstance(e, TextDelta)] == ["hi"]
    finally:
        await engine.aclose()  # closes the kept-alive connection: the handler ends
        await upstream.all_closed.wait()
        server.close()
        await server.wait_closed()
    assert upstream.connections == 1  # one connection, kept alive for all three
    # Waited for (with its timer) only when the end had not come with the last event.
    assert drains == (3 if later else 0)


async def test_the_relays_start_is_handed_out_ready_then_its_steps_go_on() -> None:
    """What an answer wait asks first (`ReadyEvents`): the start's two events with no step;
    iterated after them, the relay goes on with the answer and the reads, as it would have."""
    upstream = Upstream(later=False)
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIUpstreamEngine(
        parse_config({"id": "m", "base_url": f"http://127.0.0.1:{port}/v1"}, env={})
    )
    try:
        relay = engine.generate(ChatRequest(model="m", messages=[Message("user", "hi")]))
        assert isinstance(relay, ReadyEvents)
        assert [relay.ready(), relay.ready(), relay.ready()] == [PromptStarted(), PromptProgress(0.0), None]
        rest: list[RawEvent] = []
        async for event in relay:
            rest += event.events if isinstance(event, RawBatch) else [event]
        assert relay.ready() is None  # over: nothing more, and no start again
        plain = await run(engine)  # iterated alone: the same events, the start's two first
        assert [type(e) for e in plain] == [PromptStarted, PromptProgress, *(type(e) for e in rest)]
        assert isinstance(rest[0], Answered)
        assert [e.text for e in rest if isinstance(e, TextDelta)] == ["hi"]
    finally:
        await engine.aclose()
        await upstream.all_closed.wait()
        server.close()
        await server.wait_closed()
    assert upstream.connections == 1  # released after the ready start as after a stepped one
