"""The fast lane end to end in one process: an upstream engine's instance given a lane
(`Generation.read_through`), its reads decoded in the connection's callback (`_ReadThrough`,
engines/upstream/base.py) and pushed through the turn's stream core by `TurnPipeline.carry`
while the stream's task waits — against the same stream with every read taken by the task.
The client's frames are the same bytes; each delta is counted once either way."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import Failed, FinishReason, PromptStarted
from sluicegate.core.frames import Frame
from sluicegate.core.request import ChatRequest, Message
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.engines.instances import Instance, deltas_key
from sluicegate.engines.lane import Lane, Starts
from sluicegate.engines.scripted import ScriptedEngine, parse_script
from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine
from sluicegate.engines.upstream.http import _Connection
from sluicegate.engines.upstream.relay import Relay
from sluicegate.observe.metrics import METRICS
from sluicegate.transport.stream import Emitter
from sluicegate.turn.pipeline import LANE_READS, TurnPipeline

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
WORDS = ["Hello", ",", " wörld", " —", " a", " paced", " stream."]
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite


def chunk(frame: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(frame), frame)


def token(text: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class Paced:
    """An upstream that sends one token per read, the next once the client got the last one's
    frames (`progress`): so every read after the first arrives while the engine waits."""

    def __init__(self) -> None:
        self.progress = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            writer.write(HEAD)
            for word in WORDS:
                self.progress.clear()
                writer.write(chunk(token(word)))
                await writer.drain()
                await self.progress.wait()
            writer.write(chunk(FINISH) + b"0\r\n\r\n")
            await writer.drain()
        finally:
            writer.close()


class Wire(Emitter):
    """The transport as the lane sees it; the task's frames go here too, in order."""

    def __init__(self, producer: asyncio.Task[object], progress: asyncio.Event) -> None:
        self.producer = producer
        self.ready = True
        self.progress = progress
        self.frames: list[Frame] = []

    def emit(self, frames: list[Frame], now: float = 0.0) -> None:
        self.frames += frames
        self.progress.set()


async def stream(*, lane_on: bool) -> bytes:
    upstream = Paced()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIUpstreamEngine(
        parse_config({"id": "m", "base_url": f"http://127.0.0.1:{port}/v1"}, env={})
    )
    instance = Instance(engine, "m", max_concurrency=0, max_queue=0)
    generation = instance.generation(ChatRequest(model="m", messages=[Message("user", "hi")]))
    lane = Lane() if lane_on else None
    assert lane is None or generation.read_through(lane)
    task = asyncio.current_task()
    assert task is not None
    wire = Wire(task, upstream.progress)
    accumulator = Accumulator()
    pipeline = TurnPipeline(
        generation.events,
        ChatCompletionsEncoder("chatcmpl-1", 0, "m", include_usage=False, logprobs=False),
        accumulator,
        deltas=METRICS.cell(deltas_key("m")) if lane is not None else None,
        lane=lane,
    )
    pipeline.bind(wire)
    try:
        async with asyncio.timeout(LIMIT):
            async for frames in pipeline.frames():
                wire.emit(frames)
    finally:
        pipeline.bind(None)
        await generation.aclose()
        await engine.aclose()
        server.close()
        await server.wait_closed()
    assert accumulator.result.error is None
    assert accumulator.result.finish_reason is FinishReason.STOP
    return b"".join(f.data for f in wire.frames)


async def test_reads_carried_in_the_callback_write_what_the_task_writes() -> None:
    key = deltas_key("m")
    reads, deltas = METRICS.count(LANE_READS), METRICS.count(key)
    by_task = await stream(lane_on=False)
    assert METRICS.count(LANE_READS) == reads  # no lane: nothing carried
    assert METRICS.count(key) - deltas == len(WORDS)  # counted by the instance
    deltas = METRICS.count(key)
    by_lane = await stream(lane_on=True)
    # Every read after the first (which ends the prompt's progress) came while the task waited.
    assert METRICS.count(LANE_READS) - reads == len(WORDS) - 1
    assert METRICS.count(key) - deltas == len(WORDS)  # counted by the stream's core, once
    assert by_lane == by_task
    assert all(word.encode() in by_task for word in WORDS)
    assert Starts.waiting == 0  # every start step a connection woke has run: none left counted


async def test_while_a_start_waits_to_run_the_lane_carries_reads_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request whose next start step is ready to run (`Starts`) goes before the streams: a
    read that arrives then is not carried in the connection's callback, ahead of that step, but
    in a callback queued behind it — still by the lane, without waking the stream's task."""
    carried_at_once: list[float] = []
    data_received = _Connection.data_received

    def watched(self: _Connection, data: bytes) -> None:
        before = METRICS.count(LANE_READS)
        data_received(self, data)
        carried_at_once.append(METRICS.count(LANE_READS) - before)

    monkeypatch.setattr(_Connection, "data_received", watched)
    by_task = await stream(lane_on=False)
    reads = METRICS.count(LANE_READS)
    Starts.waiting += 1  # another request's start step, queued
    try:
        by_lane = await stream(lane_on=True)
    finally:
        Starts.waiting -= 1
    assert carried_at_once and not any(carried_at_once)  # nothing carried ahead of the start
    assert METRICS.count(LANE_READS) - reads == len(WORDS) - 1  # every read carried after it
    assert by_lane == by_task
    assert Starts.waiting == 0


async def test_an_engine_that_relays_no_reads_refuses_the_lane() -> None:
    engine = ScriptedEngine("s", parse_script({"replies": [{"content": "hi"}]}, "test"))
    instance = Instance(engine, "s", max_concurrency=0, max_queue=0)
    generation = instance.generation(ChatRequest(model="s", messages=[Message("user", "hi")]))
    try:
        assert not generation.read_through(Lane())
    finally:
        await generation.aclose()


def test_the_lane_is_not_part_of_the_request() -> None:
    assert "lane" not in ChatRequest.__dataclass_fields__


async def test_with_a_lane_the_engines_relay_is_the_whole_stream_and_gives_the_slot_back() -> None:
    """No instance loop passing on each event: the generation's stream is the engine's relay
    (one coroutine), which gives the instance's slot back on every path — here a close in the
    middle, and a close before the first event."""
    engine = OpenAIUpstreamEngine(parse_config({"id": "m", "base_url": "http://127.0.0.1:9/v1"}, env={}))
    instance = Instance(engine, "m", max_concurrency=0, max_queue=0)
    active = METRICS.key("sluicegate_generations_active", model="m")
    cancelled = METRICS.key("sluicegate_generations_cancelled_total", model="m")
    before = METRICS.counters[cancelled]
    try:
        generation = instance.generation(ChatRequest(model="m", messages=[Message("user", "hi")]))
        assert generation.read_through(Lane())
        events = generation.events
        assert await anext(events) == PromptStarted()
        relay = events.unwrapped()  # type: ignore[attr-defined]
        assert type(relay) is Relay  # the engine's relay itself, no loop around it
        assert instance.pending == 1 and METRICS.gauges[active] == 1
        await generation.aclose()
        assert not instance.busy and METRICS.gauges[active] == 0
        assert METRICS.counters[cancelled] == before + 1
        unstarted = instance.generation(ChatRequest(model="m", messages=[Message("user", "hi")]))
        assert unstarted.read_through(Lane()) and instance.pending == 1
        await unstarted.aclose()
        assert not instance.busy and METRICS.gauges[active] == 0
    finally:
        await engine.aclose()


async def test_a_relay_that_ends_gives_the_instance_its_slot_back_itself() -> None:
    """The relay's own end (here the upstream cannot be reached: a `Failed`, then the end) gives
    the slot back, with no close from the generation's owner."""
    engine = OpenAIUpstreamEngine(parse_config({"id": "m", "base_url": "http://127.0.0.1:9/v1"}, env={}))
    instance = Instance(engine, "m", max_concurrency=0, max_queue=0)
    active = METRICS.key("sluicegate_generations_active", model="m")
    try:
        generation = instance.generation(ChatRequest(model="m", messages=[Message("user", "hi")]))
        assert generation.read_through(Lane())
        events = [event async for event in generation.events]
        assert type(events[-1]) is Failed
        assert not instance.busy and METRICS.gauges[active] == 0
    finally:
        await engine.aclose()
