"""Compact event logs: request-derived parts stored once, batches of frames compressed.

A Responses stream repeats its response object in `response.created`, `response.queued`,
`response.in_progress` and the terminal event, and that object echoes the request's tools,
instructions, metadata, text format... A 14 MB request stored as 74 MB of frames was the
result. Here a run keeps a *template*: the serialised `"key":value` pairs of its first
snapshot that are worth it (large, request-derived). Each frame has those byte strings
replaced by a marker before it is stored, and restored on read, so replay is byte-identical
whatever the encoder wrote (a frame that serialised a pair differently just keeps it).
Markers use NUL, which JSON text never contains raw; a frame that has a NUL is stored as is.
A batch of frames is then length-prefixed and zlib-compressed as one blob, which also folds
the per-delta boilerplate (`"type":"response.output_text.delta","item_id":...`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

import orjson

from sluicegate.store.base import Json

# Keys of a response object that change while it runs: never part of the template.
_VOLATILE = frozenset(
    {"id", "output", "status", "usage", "error", "completed_at", "incomplete_details", "created_at"}
)
_MIN_FRAGMENT = 48  # shorter pairs cost more to look for than they save
_LENGTH = struct.Struct(">I")
_RAW, _TEMPLATED = b"\x00", b"\x01"


def template_of(response: Json) -> list[bytes]:
    """The `"key":value` byte strings of a snapshot that frames are likely to repeat."""
    fragments = [
        b'"' + key.encode() + b'":' + orjson.dumps(value)
        for key, value in response.items()
        if key not in _VOLATILE
    ]
    kept = [f for f in fragments if len(f) >= _MIN_FRAGMENT]
    return sorted(kept, key=len, reverse=True)


def dump_template(fragments: list[bytes]) -> bytes:
    # Compressed: the response column holds the same tools in the clear already.
    return zlib.compress(orjson.dumps([f.decode() for f in fragments]), 6)


def load_template(blob: bytes | None) -> list[bytes]:
    return [f.encode() for f in orjson.loads(zlib.decompress(blob))] if blob else []


def _marker(index: int) -> bytes:
    return b"\x00" + str(index).encode() + b"\x00"


def _shrink(frame: bytes, fragments: list[bytes]) -> bytes:
    if b"\x00" in frame:
        return _RAW + frame
    for i, fragment in enumerate(fragments):
        if fragment in frame:
            frame = frame.replace(fragment, _marker(i))
    return _TEMPLATED + frame


def _grow(stored: bytes, fragments: list[bytes]) -> bytes:
    frame = stored[1:]
    if stored[:1] == _RAW or b"\x00" not in frame:
        return frame
    for i, fragment in enumerate(fragments):
        frame = frame.replace(_marker(i), fragment)
    return frame


def pack_batch(frames: Iterable[bytes], fragments: list[bytes]) -> bytes:
    parts: list[bytes] = []
    for frame in frames:
        small = _shrink(frame, fragments)
        parts.append(_LENGTH.pack(len(small)))
        parts.append(small)
    return zlib.compress(b"".join(parts), 6)


def unpack_batch(blob: bytes, fragments: list[bytes]) -> list[bytes]:
    data = zlib.decompress(blob)
    frames: list[bytes] = []
    offset = 0
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        frames.append(_grow(data[offset : offset + length], fragments))
        offset += length
    return frames


def batches(frames: list[bytes], size: int) -> list[list[bytes]]:
    return [frames[i : i + size] for i in range(0, len(frames), size)]
