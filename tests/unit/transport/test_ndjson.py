"""The NDJSON transport: Ollama's framing on the shared streaming machinery (outbox,
backpressure, disconnect → cancel), and no heartbeat while a stream is quiet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from test_sse import LIMIT, Client

from sluicegate.core.frames import DONE, Frame
from sluicegate.transport.ndjson import NDJSON, ndjson_bytes
from sluicegate.transport.sse import HEARTBEAT, SSE
from sluicegate.transport.stream import Framing, StreamOutcome, stream_chunks


async def serve(chunks: AsyncIterator[list[Frame]], client: Client, framing: Framing) -> StreamOutcome:
    async with asyncio.timeout(LIMIT):
        return await stream_chunks(
            chunks, client.send, client.receive, framing=framing, heartbeat_seconds=0.02
        )


def test_a_frame_is_its_json_and_a_newline_and_no_end_sentinel() -> None:
    assert ndjson_bytes([Frame(b'{"a":1}')]) == b'{"a":1}\n'
    assert ndjson_bytes([Frame(b'{"a":1}'), Frame(b'{"b":2}'), DONE]) == b'{"a":1}\n{"b":2}\n'


async def test_the_head_says_ndjson_and_lines_follow() -> None:
    async def frames() -> AsyncIterator[list[Frame]]:
        yield [Frame(b'{"done":false}')]
        yield [Frame(b'{"done":true}')]

    client = Client()
    outcome = await serve(frames(), client, NDJSON)
    assert outcome == StreamOutcome(finished=True, client_gone=False)
    head = dict(client.sent[0]["headers"])
    assert head[b"content-type"] == b"application/x-ndjson"
    assert client.body == b'{"done":false}\n{"done":true}\n'


async def test_a_quiet_ndjson_stream_sends_nothing_while_sse_beats() -> None:
    """Side by side with the same interval: once the SSE stream has sent heartbeats, the NDJSON
    one must still have sent nothing but its head."""
    gate = asyncio.Event()

    async def frames() -> AsyncIterator[list[Frame]]:
        await gate.wait()
        yield [Frame(b'{"x":1}')]

    sse, ndjson = Client(), Client()
    streams = [
        asyncio.create_task(serve(frames(), sse, SSE)),
        asyncio.create_task(serve(frames(), ndjson, NDJSON)),
    ]
    async with asyncio.timeout(LIMIT):
        while sse.body.count(HEARTBEAT) < 2:
            await asyncio.sleep(0.01)
    assert ndjson.body == b""
    gate.set()
    await asyncio.gather(*streams)
    assert ndjson.body == b'{"x":1}\n'


async def test_disconnect_cancels_the_producer() -> None:
    log: list[str] = []

    async def frames() -> AsyncIterator[list[Frame]]:
        try:
            yield [Frame(b'{"n":1}')]
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    client = Client()
    task = asyncio.create_task(serve(frames(), client, NDJSON))
    await asyncio.wait_for(client.body_sent.wait(), LIMIT)
    client.disconnect()
    assert await task == StreamOutcome(finished=False, client_gone=True)
    assert log == ["cancelled"]
