"""What an encoder yields: a frame object, written to the wire by the transport alone.

A dialect's encoder turns canonical events into `Frame`s: an optional SSE event name and one
line of pre-serialised JSON. Only the transport turns them into bytes (`event:`/`data:` lines,
the blank line, `[DONE]`), so the SSE framing lives in one place and a WebSocket transport can
send the same frames as text messages. `data` stays bytes so the per-token fast path is one
orjson call and a few concatenations, never a second serialisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


# Not `frozen`: a frozen dataclass sets its fields through `object.__setattr__`, which made
# building a frame (one per token) cost several times a plain one. Nothing mutates a frame;
# `unsafe_hash` keeps it hashable as a value. Its `__init__` is written out: the one `dataclass`
# generates is interpreted even in the compiled build (core/events.py says more).
@dataclass(slots=True, unsafe_hash=True, init=False)
class Frame:
    data: bytes  # one line of JSON (orjson output is), or b"[DONE]"
    event: str | None = None  # the SSE `event:` name; None for data-only dialects

    def __init__(self, data: bytes, event: str | None = None) -> None:
        self.data = data
        self.event = event


DONE: Final = Frame(b"[DONE]")  # Chat Completions' and Responses' end-of-stream sentinel
