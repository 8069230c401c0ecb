"""Segmentation: raw engine deltas become items that open, take deltas and close.

This is the only place block boundaries are decided, so no dialect re-derives them. It also
gives every stream the same ending: open items are closed (unless the stream failed: then they
stay open, never reported done), the last usage is reported, then exactly one terminal event
(`Finished` or `Failed`) — whatever the engine did or failed to do.

Three pieces, each once:
- `Segments` (in `core/segmenter.py`, beside the state machine it drives, so that it is
  compiled with it): one read's raw events (a `RawBatch` or a single event) through the
  deadline's clock and the segmenter's state machine, synchronously. The turn's stream core
  (`turn/stream_core.py`) is built on it, and so is `segment` below.
- `Reads` (in `core/segmenter.py` too, compiled): the one loop that reads an engine's stream
  in a task: it owns the deadline's timer, turns an engine's exception or the deadline's
  expiry into a final `Failed`, and closes the engine's stream on every path.
- `segment`: the canonical stream for a consumer without an encoder (a compaction, a test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sluicegate.core.deadlines import Deadline
from sluicegate.core.events import Event, EventBatch, RawBatch, RawEvent
from sluicegate.core.segmenter import Reads, Segments


async def segment(raw: AsyncIterator[RawEvent], deadline: Deadline | None = None) -> AsyncIterator[Event]:
    """Turn an engine's raw events into the canonical item-structured stream (with a
    `deadline`, guarded too): one event at a time, or an `EventBatch` per read that made more
    than one."""
    segments = Segments(deadline)
    out: list[Event] = []
    events = Reads(raw, deadline)
    try:
        while (event := await events.next()) is not None:
            if not segments.push(event, out):
                break  # what came before the failure goes out with the ending
            if len(out) > 1 and type(event) is RawBatch:
                yield EventBatch(out)
                out = []
                continue
            for canonical in out:
                yield canonical
            out.clear()
    finally:
        await events.aclose()
    segments.end(out)
    for canonical in out:
        yield canonical
