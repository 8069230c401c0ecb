"""The streaming transport alone, in process: CPU per relayed chunk and memory per open stream,
our server's sink (`CycleWriter`, the direct write of round eight) against the plain ASGI sink
(`transport/asgi_sink.py`, which took the outbox path's place), the reference in the same run.

    python bench/stream_relay.py [--rounds 5] [--streams 64] [--chunks 2000]

Each stream is one request through our uvicorn protocol (`JSONHttpToolsProtocol`) on a fake
socket that takes every write; its body is `stream_chunks` over a producer that waits for a
future per chunk, which a loop callback resolves, as an upstream read does. So a chunk costs
what the transport adds to a paced token: the wake-up(s), the framing, the write — no
pipeline, no network; uvloop when installed, as uvicorn picks it. The two paths alternate, round by round, in one process; CPU is
`time.process_time`. Memory: 500 streams held open, traced by tracemalloc, per stream.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from sluicegate.app.http_protocol import JSONHttpToolsProtocol
from sluicegate.core.frames import Frame
from sluicegate.transport.sse import SSE
from sluicegate.transport.stream import Chunk, body_writer, stream_chunks

REQUEST = b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
FRAME = [
    Frame(b'{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"delta":{"content":" word"}}]}')
]


class Sink(asyncio.Transport):
    """A client socket that takes every write at once."""

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def server(direct: bool, chunks: Any) -> tuple[uvicorn.Config, ServerState]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        writer = body_writer(scope) if direct else None
        await stream_chunks(chunks(), send, receive, framing=SSE, heartbeat_seconds=15.0, writer=writer)

    config = uvicorn.Config(app, log_level="error")
    config.load()
    return config, ServerState()


def open_stream(config: uvicorn.Config, state: ServerState) -> JSONHttpToolsProtocol:
    proto = JSONHttpToolsProtocol(config=config, server_state=state, app_state={})
    proto.connection_made(Sink())
    proto.data_received(REQUEST)
    return proto


async def cpu_per_chunk(direct: bool, streams: int, chunks_each: int) -> float:
    loop = asyncio.get_running_loop()

    async def chunks() -> AsyncIterator[Chunk]:
        for _ in range(chunks_each):
            wake = loop.create_future()
            loop.call_soon(wake.set_result, None)  # an upstream read arrives
            await wake
            yield FRAME

    config, state = server(direct, chunks)
    started = time.process_time()
    for _ in range(streams):
        open_stream(config, state)
    while state.tasks:
        await asyncio.sleep(0.001)
    return (time.process_time() - started) / (streams * chunks_each) * 1e6


async def kib_per_open_stream(direct: bool, streams: int = 500) -> float:
    gate = asyncio.Event()

    async def chunks() -> AsyncIterator[Chunk]:
        yield FRAME
        await gate.wait()

    config, state = server(direct, chunks)
    for _ in range(20):  # warm: caches, the first allocations
        open_stream(config, state)
    await asyncio.sleep(0.01)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = [open_stream(config, state) for _ in range(streams)]
    await asyncio.sleep(0.01)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gate.set()
    while state.tasks:
        await asyncio.sleep(0.001)
    del held
    return (after - before) / streams / 1024


async def main(args: argparse.Namespace) -> None:
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for direct in (False, True):
            cpu[direct].append(await cpu_per_chunk(direct, args.streams, args.chunks))
    memory = {direct: await kib_per_open_stream(direct) for direct in (False, True)}
    print(f"{args.streams} streams x {args.chunks} chunks, medians of {args.rounds} alternating rounds")
    print("path     CPU µs/chunk (min-max)      KiB per open stream")
    for direct, name in ((False, "outbox"), (True, "direct")):
        values = cpu[direct]
        print(
            f"{name:8} {statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})"
            f"          {memory[direct]:6.2f}"
        )
    ratio = statistics.median(cpu[True]) / statistics.median(cpu[False])
    print(f"direct / outbox: CPU {ratio:.2f}x, memory {memory[True] / memory[False]:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=2000)
    try:  # the loop uvicorn runs the server on when it is installed
        import uvloop
    except ImportError:
        asyncio.run(main(parser.parse_args()))
    else:
        uvloop.run(main(parser.parse_args()))
