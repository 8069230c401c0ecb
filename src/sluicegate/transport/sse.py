"""Server-Sent Events: the framing (`event:`/`data:` lines, the blank line, `[DONE]`) and the
`: heartbeat` comment. Encoders yield `Frame`s; only this module writes them as SSE bytes.

Headers go out at once; from then on a heartbeat is sent whenever nothing else was sent for
`heartbeat_seconds`, also while the engine has produced nothing yet. The write path,
backpressure and disconnect → cancel are every streaming transport's (`transport/stream.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import replace
from typing import Final

from starlette.types import Receive, Send

from sluicegate.core.frames import Frame
from sluicegate.transport.stream import (
    DEFAULT_BUFFER_BYTES,
    SERVER_SEND,
    Chunk,
    Framing,
    Sink,
    StreamOutcome,
    body_writer,
    raw_headers,
    server_send,
    stream_chunks,
)

__all__ = [
    "HEARTBEAT",
    "SERVER_SEND",
    "Chunk",
    "StreamOutcome",
    "body_writer",
    "frame_bytes",
    "frames_bytes",
    "server_send",
    "sse_framing",
    "stream_sse",
]

HEARTBEAT: Final = b": heartbeat\n\n"
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}

_PREFIXES: dict[str | None, bytes] = {None: b"data: "}  # per event name: its lines up to the data


def _prefix(event: str | None) -> bytes:
    prefix = _PREFIXES.get(event)
    if prefix is None:
        assert event is not None
        prefix = b"event: " + event.encode() + b"\ndata: "
        if len(_PREFIXES) < 256:  # encoders use a few dozen names; the cache stays small anyway
            _PREFIXES[event] = prefix
    return prefix


def frame_bytes(frame: Frame) -> bytes:
    """One SSE frame; `frame.data` is a single line (orjson output is)."""
    return _prefix(frame.event) + frame.data + b"\n\n"


def frames_bytes(frames: Iterable[Frame]) -> bytes:
    parts: list[bytes] = []
    for frame in frames:
        parts += (_prefix(frame.event), frame.data, b"\n\n")
    return b"".join(parts)


def _list_bytes(frames: list[Frame]) -> bytes:
    """`frames_bytes` for what a producer yields: one frame per token, or a read's worth."""
    if len(frames) == 1:
        frame = frames[0]
        return _prefix(frame.event) + frame.data + b"\n\n"
    return frames_bytes(frames)


SSE: Final = Framing(
    _list_bytes, raw_headers({"content-type": "text/event-stream; charset=utf-8", **SSE_HEADERS}), HEARTBEAT
)


def sse_framing(heartbeat: Frame | None = None) -> Framing:
    """SSE, with a dialect's own keep-alive event (Anthropic's `ping`) instead of the comment."""
    return SSE if heartbeat is None else replace(SSE, heartbeat=frame_bytes(heartbeat))


def stream_sse(
    chunks: AsyncIterator[Chunk],
    send: Send,
    receive: Receive,
    *,
    heartbeat_seconds: float,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    body_send: Send | None = None,  # for the body, once the head went through `send`
    writer: Sink | None = None,  # the server's own sink (`body_writer`)
) -> Awaitable[StreamOutcome]:
    """Send the response head, then every chunk as SSE, with heartbeats and backpressure."""
    return stream_chunks(
        chunks,
        send,
        receive,
        framing=SSE,
        heartbeat_seconds=heartbeat_seconds,
        buffer_bytes=buffer_bytes,
        status=status,
        headers=headers,
        body_send=body_send,
        writer=writer,
    )
