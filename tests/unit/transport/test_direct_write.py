"""The direct write path (`transport/stream.py`, `app/http_protocol.py` `CycleWriter`): stream
bodies written to the socket by the producer, through our real uvicorn protocol on a fake
transport, against the same stream sent the ASGI way (no writer). The head and the body the
client decodes must be the same bytes, whatever the client's reading does to the flow; only
where the chunked encoding cuts may differ (the ASGI way joins frames that waited together)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from loop_support import settled
from sluicegate.app.http_protocol import JSONHttpToolsProtocol
from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import Finished, FinishReason, ItemKind, RawEvent, TextDelta
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.pipeline import StreamLimits, stream_deadline
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.transport.ndjson import NDJSON
from sluicegate.transport.sse import HEARTBEAT, SSE
from sluicegate.transport.stream import BODY_WRITER, Chunk, Framing, StreamOutcome, body_writer, stream_chunks
from sluicegate.turn.pipeline import TurnPipeline

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite
REQUEST = b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


class Wire(asyncio.Transport):
    """A socket as the protocol sees it. `high`: the write buffer's high-water mark — above it
    the protocol is told to pause writing, as asyncio's transports do, until `read` (the
    client) takes enough that it is below `high // 2`."""

    def __init__(self, high: int | None = None) -> None:
        super().__init__()
        self.received = bytearray()  # what the client has read
        self.pending = bytearray()  # written, not read yet
        self.writes = 0
        self.high = high
        self.paused = False
        self.closing = False
        self.protocol: JSONHttpToolsProtocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closing or not data
        self.writes += 1
        self.pending += data
        if self.high is None:
            self.read()
        elif len(self.pending) > self.high and not self.paused:
            self.paused = True
            assert self.protocol is not None
            self.protocol.pause_writing()

    def read(self, limit: int | None = None) -> None:
        taken = len(self.pending) if limit is None else min(limit, len(self.pending))
        self.received += self.pending[:taken]
        del self.pending[:taken]
        if self.paused and self.high is not None and len(self.pending) <= self.high // 2:
            self.paused = False
            assert self.protocol is not None
            self.protocol.resume_writing()

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return len(self.pending)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def one_frame_then_stall(log: list[str]) -> Callable[[], AsyncIterator[Chunk]]:
    """A pipeline that sends `{"a":1}` and then waits until it is cancelled (noted in `log`)."""

    async def chunks() -> AsyncIterator[Chunk]:
        try:
            yield [Frame(b'{"a":1}')]
            await asyncio.sleep(30)  # (never reached: the test cancels it first)
            yield [Frame(b'{"never":1}')]
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    return chunks


def stream_app(
    chunks: Callable[[], AsyncIterator[Chunk]],
    *,
    direct: bool,
    framing: Framing = SSE,
    heartbeat_seconds: float = 0.0,
    outcomes: list[StreamOutcome] | None = None,
    buffer_bytes: int = 4096,
) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        writer = body_writer(scope)
        assert writer is not None  # our protocol always offers one; the ASGI run declines it
        outcome = await stream_chunks(
            chunks(),
            send,
            receive,
            framing=framing,
            heartbeat_seconds=heartbeat_seconds,
            buffer_bytes=buffer_bytes,
            writer=writer if direct else None,
        )
        if outcomes is not None:
            outcomes.append(outcome)

    return app


async def served(app: Any, wire: Wire, *, until: Callable[[], bool] | None = None) -> JSONHttpToolsProtocol:
    """One request through `JSONHttpToolsProtocol` on `wire`; returns once the app's task ended
    (or, with `until`, once that holds: the caller ends the stream)."""
    config = uvicorn.Config(app, log_level="error")
    config.load()
    state = ServerState()
    proto = JSONHttpToolsProtocol(config=config, server_state=state, app_state={})
    wire.protocol = proto
    proto.connection_made(wire)
    proto.data_received(REQUEST)
    async with asyncio.timeout(LIMIT):
        if until is not None:
            while not until():
                await asyncio.sleep(0.001)
            return proto
        while state.tasks:
            if wire.high is not None:  # a slow client: a little at a time, while the server writes
                wire.read(1000)
            await asyncio.sleep(0)
    return proto


CORPUS: dict[str, list[Chunk]] = {
    "frame lists": [
        [Frame(b'{"a":1}')],
        [Frame(b'{"b":2}', "named"), Frame(b'{"c":3}')],
        [],
        b"",
        b"data: raw bytes\n\n",
        [DONE],
    ],
    "one long frame": [[Frame(b'{"x":"' + b"y" * 20_000 + b'"}')], [DONE]],
    "many small frames": [[Frame(b'{"i":%d}' % i)] for i in range(300)] + [[DONE]],
}


async def chunks_of(items: Iterable[Chunk], *, yield_between: bool = False) -> AsyncIterator[Chunk]:
    for item in items:
        if yield_between:  # ready again at once: it races whatever the loop wakes next
            await asyncio.sleep(0)
        yield item


async def pipeline_chunks() -> list[Chunk]:
    async def engine() -> AsyncIterator[RawEvent]:
        for word in ["Hello", ",", " wörld", " \u2603", ' "q"', "\n", "end"]:
            yield TextDelta(ItemKind.MESSAGE, word)
        yield Finished(FinishReason.STOP)

    encoder = ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=True, logprobs=False)
    pipeline = TurnPipeline(engine(), encoder, Accumulator(), deadline=stream_deadline(StreamLimits()))
    return [frames async for frames in pipeline.frames()]


async def corpus() -> dict[str, list[Chunk]]:
    return {**CORPUS, "a chat pipeline's frames": await pipeline_chunks()}


def decoded(wire: Wire) -> tuple[bytes, bytes]:
    """The response head and its chunked body decoded, checking every chunk's framing."""
    head, _, rest = bytes(wire.received).partition(b"\r\n\r\n")
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        assert rest[size : size + 2] == b"\r\n", "a chunk's size does not match its bytes"
        if size == 0:
            assert rest == b"\r\n", "bytes after the last chunk"
            return head, bytes(body)
        body += rest[:size]
        rest = rest[size + 2 :]


async def wire_bytes(
    items: list[Chunk], *, direct: bool, framing: Framing = SSE, high: int | None = None
) -> Wire:
    wire = Wire(high)
    await served(
        stream_app(lambda: chunks_of(items, yield_between=high is not None), direct=direct, framing=framing),
        wire,
    )
    wire.read()
    return wire


@pytest.mark.parametrize("framing", [SSE, NDJSON], ids=["sse", "ndjson"])
async def test_the_direct_writer_writes_what_send_writes(framing: Framing) -> None:
    for name, items in (await corpus()).items():
        direct = await wire_bytes(items, direct=True, framing=framing)
        asgi = await wire_bytes(items, direct=False, framing=framing)
        assert decoded(direct) == decoded(asgi), name
        expected = b"".join(
            item if isinstance(item, bytes) else framing.frames(item) for item in items if item
        )
        assert decoded(direct)[1] == expected, name


async def test_the_direct_writer_is_used_when_the_socket_is_free() -> None:
    """Every chunk its own direct write: head, one write per non-empty chunk, the end."""
    items = CORPUS["many small frames"]
    direct = await wire_bytes(items, direct=True)
    assert direct.writes == 1 + len(items) + 1


async def test_order_is_kept_for_a_slow_reader() -> None:
    """The client reads a little at a time: the socket pauses and resumes writing over and
    over, chunks go direct, then queue behind the sender, then go direct again — the bytes
    must be complete and in order."""
    for name, items in (await corpus()).items():
        reference = await wire_bytes(items, direct=False)
        for high in (64, 512, 4096):
            slow = await wire_bytes(items, direct=True, high=high)
            assert decoded(slow) == decoded(reference), (name, high)


async def test_a_client_that_leaves_mid_stream_cancels_the_producer() -> None:
    log: list[str] = []
    outcomes: list[StreamOutcome] = []

    chunks = one_frame_then_stall(log)

    wire = Wire()
    proto = await served(
        stream_app(chunks, direct=True, outcomes=outcomes), wire, until=lambda: b'{"a":1}' in wire.received
    )
    proto.connection_lost(None)
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            await asyncio.sleep(0.001)
    assert log == ["cancelled"]
    assert outcomes == [StreamOutcome(finished=False, client_gone=True)]
    assert b"never" not in wire.received


async def test_heartbeats_go_out_on_a_quiet_stream() -> None:
    gate = asyncio.Event()

    async def chunks() -> AsyncIterator[Chunk]:
        await gate.wait()
        yield [Frame(b'{"late":1}')]

    wire = Wire()
    await served(
        stream_app(chunks, direct=True, heartbeat_seconds=0.02),
        wire,
        until=lambda: wire.received.count(HEARTBEAT) >= 2,
    )
    gate.set()
    async with asyncio.timeout(LIMIT):
        while not wire.received.endswith(b"0\r\n\r\n"):
            await asyncio.sleep(0.001)
    body = decoded(wire)[1]
    assert body.count(HEARTBEAT) >= 2
    assert b'data: {"late":1}' in body


async def test_frames_written_directly_hold_off_the_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat goes out only after `heartbeat_seconds` with nothing sent: direct writes
    count as sent. The loop's clock is moved by hand, so no wall time is involved."""
    loop = asyncio.get_running_loop()
    real = loop.time
    offset = 0.0
    monkeypatch.setattr(loop, "time", lambda: real() + offset)
    step = asyncio.Event()
    frames_out = 0

    async def chunks() -> AsyncIterator[Chunk]:
        nonlocal frames_out
        for i in range(6):
            await step.wait()
            step.clear()
            frames_out += 1
            yield [Frame(b'{"i":%d}' % i)]

    wire = Wire()
    await served(
        stream_app(chunks, direct=True, heartbeat_seconds=10.0), wire, until=lambda: bool(wire.received)
    )
    for i in range(6):
        step.set()  # a frame goes out…
        async with asyncio.timeout(LIMIT):
            while frames_out <= i:
                await asyncio.sleep(0)
        await settled()
        offset += 6.0  # …and 6 s pass: a beat that counted from the stream's start is due
        await settled()
    async with asyncio.timeout(LIMIT):
        while not wire.received.endswith(b"0\r\n\r\n"):
            await asyncio.sleep(0.001)
    body = decoded(wire)[1]
    assert HEARTBEAT not in body
    assert body.count(b'data: {"i":') == 6


def test_a_scope_without_a_writer_has_none() -> None:
    assert body_writer({}) is None
    assert body_writer({BODY_WRITER: None}) is None


async def test_a_client_that_stops_reading_stops_the_producer() -> None:
    """Backpressure on the direct path: once the socket's buffer is above its high-water mark
    the producer stops writing and fills the outbox, then waits — it is not drained."""
    produced = 0
    frame = b"data: " + b"x" * 1000 + b"\n\n"
    log: list[str] = []

    async def chunks() -> AsyncIterator[Chunk]:
        nonlocal produced
        try:
            for _ in range(10_000):
                produced += 1
                yield frame
        except (asyncio.CancelledError, GeneratorExit) as exc:
            log.append(type(exc).__name__)
            raise

    wire = Wire(high=16 * 1024)
    outcomes: list[StreamOutcome] = []
    proto = await served(stream_app(chunks, direct=True, outcomes=outcomes), wire, until=lambda: wire.paused)
    await settled()
    # The socket's high-water mark, plus one outbox (4 KiB) and one write in flight.
    assert produced <= (16 * 1024 + 2 * 4096) // len(frame) + 3
    proto.connection_lost(None)
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            await asyncio.sleep(0.001)
    assert outcomes == [StreamOutcome(finished=False, client_gone=True)]
    assert produced < 100
    assert log  # the chain was ended, not left suspended


async def test_a_client_gone_before_the_stream_starts_ends_it_at_once() -> None:
    log: list[str] = []
    outcomes: list[StreamOutcome] = []
    start = asyncio.Event()

    async def chunks() -> AsyncIterator[Chunk]:
        log.append("pulled")
        yield [Frame(b'{"a":1}')]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await start.wait()  # the request's preparation, while the client leaves
        outcomes.append(await stream_chunks(chunks(), send, receive, framing=SSE, writer=body_writer(scope)))

    wire = Wire()
    proto = await served(app, wire, until=lambda: True)
    proto.connection_lost(None)
    start.set()
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            await asyncio.sleep(0.001)
    assert outcomes == [StreamOutcome(finished=False, client_gone=True)]
    assert log == []  # the pipeline was never pulled
    assert wire.received == b""


async def test_a_cancel_from_the_server_is_not_taken_for_a_disconnect() -> None:
    """The server's shutdown cancels the request's task: that cancel must get through (the
    stream catches only the one it sent itself when the client left)."""
    log: list[str] = []

    chunks = one_frame_then_stall(log)

    wire = Wire()
    outcomes: list[StreamOutcome] = []
    proto = await served(
        stream_app(chunks, direct=True, outcomes=outcomes), wire, until=lambda: b'{"a":1}' in wire.received
    )
    (task,) = proto.server_state.tasks
    task.cancel()
    async with asyncio.timeout(LIMIT):
        while not task.done():
            await asyncio.sleep(0.001)
    assert log == ["cancelled"]
    assert outcomes == []  # the cancel came out of the stream (uvicorn's run_asgi logs it)
    proto.connection_lost(None)


async def test_the_chains_own_cancel_reaches_it_while_a_chunk_waits_for_the_drain() -> None:
    """A deadline (or the turn's cancel) cancels the task the chain runs in. If it lands while
    the stream waits for a slow client's drain, it is not the client leaving: the waiting chunk
    still goes out, in order, and the cancel reaches the chain, which ends the stream its way."""
    big = b"x" * 3000

    async def chunks() -> AsyncIterator[Chunk]:
        yield [Frame(b'{"a":"' + big + b'"}')]  # over the high-water mark: writing pauses
        yield [Frame(b'{"b":1}')]  # waits for the drain
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:  # a deadline's own: it takes the cancel back
            task = asyncio.current_task()
            assert task is not None and task.uncancel() == 0
            yield [Frame(b'{"timed_out":1}')]

    wire = Wire(high=1024)
    outcomes: list[StreamOutcome] = []
    app = stream_app(chunks, direct=True, outcomes=outcomes, buffer_bytes=1024)
    proto = await served(app, wire, until=lambda: wire.paused)
    await settled()  # the stream is in `send`, waiting for the drain
    (task,) = proto.server_state.tasks
    task.cancel()  # the deadline fires
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            wire.read(1000)
            await asyncio.sleep(0)
    wire.read()
    body = decoded(wire)[1]
    assert body == b'data: {"a":"' + big + b'"}\n\ndata: {"b":1}\n\ndata: {"timed_out":1}\n\n'
    assert outcomes == [StreamOutcome(finished=True, client_gone=False)]


async def test_a_slow_client_may_leave_buffer_bytes_waiting_before_the_chain_waits() -> None:
    """`stream_buffer_bytes` bounds what waits for a slow client, as the outbox did: past the
    socket's high-water mark, chunks are still written until that much waits in its buffer."""
    produced = 0
    frame = b"data: " + b"x" * 1000 + b"\n\n"

    async def chunks() -> AsyncIterator[Chunk]:
        nonlocal produced
        for _ in range(10_000):
            produced += 1
            yield frame

    wire = Wire(high=1024)
    proto = await served(
        stream_app(chunks, direct=True, buffer_bytes=16 * 1024), wire, until=lambda: wire.paused
    )
    await settled()
    assert 16 * 1024 <= len(wire.pending) <= 16 * 1024 + 2 * len(frame)
    assert produced <= 16 * 1024 // len(frame) + 3
    proto.connection_lost(None)
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            await asyncio.sleep(0.001)


class Binding:
    """A turn's side of a fast lane (`LaneBinding`): keeps the stream's emitter while bound."""

    def __init__(self) -> None:
        self.emitter: Any = None
        self.bound = 0

    def bind(self, emitter: Any) -> None:
        self.emitter = emitter
        self.bound += emitter is not None


async def test_a_lanes_frames_go_out_through_the_sinks_native_line_in_order() -> None:
    """The lane's writes (`_Stream.emit`) take the sink's `Line` while it may write, and the
    sink's own `write` when it may not (the flow paused): the client decodes every frame in
    order either way, and the line's `paused` follows the transport's."""
    binding, release = Binding(), asyncio.Event()
    lane_frames = [[Frame(b'{"t":%d}' % i)] for i in range(120)]

    async def chunks() -> AsyncIterator[Chunk]:
        yield [Frame(b'{"first":1}')]
        await release.wait()  # the task waits: the lane writes meanwhile
        yield [DONE]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await stream_chunks(
            chunks(),
            send,
            receive,
            framing=SSE,
            buffer_bytes=1 << 20,
            writer=body_writer(scope),
            lane=binding,
        )

    wire = Wire(high=600)
    proto = await served(app, wire, until=lambda: binding.emitter is not None)
    emitter = binding.emitter
    line = emitter.line
    assert line is not None and line.open
    native, paused_seen = 0, False
    for frames in lane_frames:
        before = wire.writes
        taken = line.write(b"") if not line.paused else False  # (what emit will find)
        emitter.emit(frames, asyncio.get_running_loop().time())
        assert wire.writes == before + 1
        native += taken
        paused_seen |= line.paused
        assert line.paused == wire.paused
        if wire.paused:
            wire.read(250)  # a slow client: the flow resumes below half the mark
    assert paused_seen and 0 < native < len(lane_frames)
    release.set()
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            wire.read()
            await asyncio.sleep(0)
    wire.read()
    assert not line.open  # the stream ended: the line is closed with it
    _, body = decoded(wire)
    expected = [b'{"first":1}'] + [frames[0].data for frames in lane_frames] + [b"[DONE]"]
    assert body == b"".join(b"data: " + data + b"\n\n" for data in expected)


async def test_a_line_refuses_once_the_client_left() -> None:
    binding, log = Binding(), []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await stream_chunks(
            one_frame_then_stall(log)(), send, receive, framing=SSE, writer=body_writer(scope), lane=binding
        )

    wire = Wire()
    proto = await served(app, wire, until=lambda: binding.emitter is not None)
    line = binding.emitter.line
    assert line is not None and line.write(b"x")
    before = wire.writes
    proto.connection_lost(None)
    assert not line.open and not line.write(b"late") and wire.writes == before
    async with asyncio.timeout(LIMIT):
        while proto.server_state.tasks:
            await asyncio.sleep(0)
    assert log == ["cancelled"]
