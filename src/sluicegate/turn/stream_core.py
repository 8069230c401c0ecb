"""The middle of a turn's stream, composed once: a read's raw events in, its frames out.

Per read, in order: the model's delta count (`sluicegate_engine_deltas_total`, when the stream
counts them itself: see below), the deadline's clock and the segmentation (`core/segmenter.py`
`Segments`), the metrics tap, the accumulator and the dialect's encoder. It is synchronous and
holds no task, so two drivers share it:

- the stream's task (`TurnPipeline.frames`), in its read loop, which also owns the end of the
  stream (`finish`), its persistence and its cancellation;
- the upstream connection's callback while that task waits for a read (the fast lane,
  `TurnPipeline.carry`): a read that holds only deltas and usage is pushed here and its frames
  go straight to the transport, without waking the task.

The delta count: an instance counts its engine's deltas in its own loop, unless the generation
was given a fast lane (`engines/lane.py`); then reads may bypass that loop, and the stream's
core counts every read instead, whichever driver pushes it — each once.

It is compiled (`sluicegate/_compiled.py`) with the steps it calls, so a read crosses from
the driver's Python into native code once.
"""

from __future__ import annotations

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.deadlines import Deadline
from sluicegate.core.events import Event, Failed, RawBatch, RawEvent, TextDelta, ToolCallDelta
from sluicegate.core.frames import Frame
from sluicegate.core.segmenter import Segments
from sluicegate.dialects.base import Encoder
from sluicegate.observe.requests import EventTap
from sluicegate.observe.series import Value


class StreamCore:
    __slots__ = ("_out", "accumulator", "deltas", "encoder", "segments", "tap")

    def __init__(
        self,
        encoder: Encoder,
        accumulator: Accumulator,
        tap: EventTap | None = None,
        deadline: Deadline | None = None,
        deltas: Value | None = None,
    ) -> None:
        self.encoder = encoder
        self.accumulator = accumulator
        self.tap = tap  # metrics and the access line, per canonical event
        self.segments = Segments(deadline)
        # The model's delta counter's series (`METRICS.cell`), when this stream counts (see above).
        self.deltas = deltas
        self._out: list[Event] = []

    @property
    def failure(self) -> Failed | None:
        """What failed the stream (a `Failed` read): nothing more may be pushed; `finish` it."""
        return self.segments.failure

    def push(self, event: RawEvent) -> list[Frame]:
        """One read (a `RawBatch`, or a single event) → its frames, never a terminal one."""
        cell = self.deltas
        if cell is not None:
            if type(event) is RawBatch:
                _count_deltas(cell, event.events)
            elif type(event) is TextDelta or type(event) is ToolCallDelta:
                cell.inc(1.0)
        self.segments.push(event, self._out)
        return self._frames()

    def push_read(self, events: list[RawEvent], now: float) -> list[Frame]:
        """`push(RawBatch(events))` for the fast lane's read, without the batch object; `now`:
        the loop's time the read came in (`Carrier.carry`'s)."""
        cell = self.deltas
        if cell is not None:
            _count_deltas(cell, events)
        self.segments.push_read(events, self._out, now)
        return self._frames()

    def _frames(self) -> list[Frame]:
        """The frames of what the last read put in `_out`, which is emptied."""
        out = self._out
        if not out:
            return []
        frames = self._encode(out)
        out.clear()
        return frames

    def finish(self) -> tuple[list[Frame], list[Frame]]:
        """The stream's ending: (the frames of what closes it — items, usage — and the frames
        of its terminal event, `Finished` or `Failed`), kept apart because the task stores the
        turn before the terminal frames may leave."""
        out = self._out
        self.segments.end(out)
        terminal = out.pop()
        before = self._encode(out) if out else []
        out.clear()
        return before, self._encode((terminal,))

    def _encode(self, events: list[Event] | tuple[Event, ...]) -> list[Frame]:
        # The accumulator called as itself, not through a bound `feed`: compiled, that is a
        # native call, where the bound method was a generic one (its arguments parsed per event).
        tap, accumulator = self.tap, self.accumulator
        if len(events) == 1:  # a paced token: its frames as the encoder made them
            canonical = events[0]
            if tap is not None:
                tap.see(canonical)
            accumulator.feed(canonical)
            # (called by name: compiled, binding `encode` first makes a bound method per read)
            return self.encoder.encode(canonical)
        encode = self.encoder.encode
        frames: list[Frame] = []
        for canonical in events:
            if tap is not None:
                tap.see(canonical)
            accumulator.feed(canonical)
            frames += encode(canonical)
        return frames


def _count_deltas(cell: Value, events: list[RawEvent]) -> None:
    """A read's text and tool-call deltas onto the model's delta counter."""
    n = 0
    for inner in events:
        if type(inner) is TextDelta or type(inner) is ToolCallDelta:
            n += 1
    cell.inc(n)
