"""The turn's side of a stream's fast lane (core/lane.py): a read's events through the same
steps the generators would take them — the instance's delta count, the deadline's clock, the
segmenter, the metrics tap, the accumulator, the encoder — and on to the transport, in the
upstream connection's callback.

It carries only what passes through those layers unchanged in kind: text and tool-call deltas
and usage reports, none of which can end a stream. Anything else (the end, a failure) and any
moment the usual path must own (before the transport runs, a cancelled or ended turn, a full
outbox, a wait that is not the stream's own task) is refused with nothing changed, and the
engine hands the events to the generators instead.
"""

from __future__ import annotations

import asyncio
import os

from sluicegate.core.deadlines import Deadline
from sluicegate.core.events import Event, RawEvent, TextDelta, ToolCallDelta, UsageReport
from sluicegate.core.frames import Frame
from sluicegate.core.lane import Lane
from sluicegate.core.segmenter import Segmenter
from sluicegate.observe.metrics import METRICS, Key
from sluicegate.transport.stream import Emitter
from sluicegate.turn.pipeline import TurnPipeline

# Off with SLUICEGATE_FAST_LANE=0: every read takes the generators (the tests compare the two).
ENABLED = os.environ.get("SLUICEGATE_FAST_LANE", "1") != "0"
READS = METRICS.key("sluicegate_fast_lane_reads_total")


class TurnLane:
    __slots__ = ("_deadline", "_deltas", "_emitter", "_lane", "_pipeline", "_state")

    def __init__(
        self, lane: Lane, pipeline: TurnPipeline, state: Segmenter, deadline: Deadline | None, deltas: Key
    ) -> None:
        self._lane = lane
        self._pipeline = pipeline
        self._state = state
        self._deadline = deadline
        self._deltas = deltas
        self._emitter: Emitter | None = None

    def bind(self, emitter: Emitter | None) -> None:
        """The stream's transport runs (`emitter`), or has stopped (None)."""
        self._emitter = emitter
        self._lane.deliver = self.deliver if emitter is not None else None

    def deliver(self, batch: list[RawEvent], task: asyncio.Task[object] | None) -> bool:
        emitter = self._emitter
        pipeline = self._pipeline
        if (
            emitter is None
            or task is not emitter.producer
            or not emitter.ready
            or pipeline.ended
            or pipeline.cancel_reason is not None
        ):
            return False
        deltas = 0
        for event in batch:
            kind = type(event)
            if kind is TextDelta or kind is ToolCallDelta:
                deltas += 1
            elif kind is not UsageReport:
                return False
        # From here on, what the layers between the engine and the transport do per read.
        METRICS.counters[self._deltas] += deltas  # engines/instances.py
        deadline = self._deadline
        if deadline is not None:  # core/segment.py
            deadline.last = deadline.clock()
        state = self._state
        out: list[Event] = []
        for event in batch:
            if type(event) is TextDelta:
                state.text(event, out)
            else:
                state.step(event, out)
        tap = pipeline.tap  # turn/pipeline.py
        feed, encode = pipeline.accumulator.feed, pipeline.encoder.encode
        frames: list[Frame] = []
        for canonical in out:
            if tap is not None:
                tap.see(canonical)
            feed(canonical)
            frames += encode(canonical)
        if frames:
            emitter.emit(frames)
        METRICS.counters[READS] += 1
        return True
