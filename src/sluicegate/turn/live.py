"""Stored turns while they are being generated: foreground ones and background runs.

A live turn is what `GET /v1/responses/{id}` shows before the record is stored, what
`previous_response_id` must wait for, and what DELETE and `/cancel` stop. A background run is a
live turn with a task and a frame log of its own: it owns the turn's resources (taken over from
the request that started it), outlives any connection, and can be followed from any event on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from typing import Any

from sluicegate.core.frames import DONE, Frame
from sluicegate.dialects.base import Encoder
from sluicegate.transport.replay import FrameLog
from sluicegate.transport.sse import frame_bytes
from sluicegate.turn.pipeline import TurnPipeline

log = logging.getLogger(__name__)
Json = dict[str, Any]


class LiveTurn:
    """A foreground stored turn: registered from its first frame until it is persisted."""

    background = False

    def __init__(
        self,
        turn_id: str,
        pipeline: TurnPipeline,
        encoder: Encoder,
        live: dict[str, LiveTurn],
        input_items: list[Json] | None = None,
    ) -> None:
        self.id = turn_id
        self.input_items = input_items or []
        self.pipeline = pipeline
        self.encoder = encoder
        self._live = live
        self._done = asyncio.Event()

    def __enter__(self) -> LiveTurn:
        self._live[self.id] = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.pop(self.id, None)
        self._done.set()

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def snapshot(self) -> Json:
        return self.encoder.response_object() or {}

    def cancel(self, reason: str) -> None:
        self.pipeline.cancel(reason)

    async def wait(self) -> Json:
        await self._done.wait()
        return self.snapshot()


class BackgroundRun(LiveTurn):
    """A turn run by a task of its own, its frames kept in a log that clients follow."""

    background = True

    def __init__(
        self,
        turn_id: str,
        pipeline: TurnPipeline,
        encoder: Encoder,
        live: dict[str, LiveTurn],
        owned: AsyncExitStack,
        input_items: list[Json] | None = None,
    ) -> None:
        super().__init__(turn_id, pipeline, encoder, live, input_items)
        self.log = FrameLog()
        self._owned = owned  # everything the turn holds; released when the run ends
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Register, log the opening frames (the response is `queued` from here on), then let
        a task of its own run the rest."""
        self._live[self.id] = self
        frames = self.pipeline.frames()
        try:
            self._log(await anext(frames))  # only the encoder's opening: no engine work yet
            self.pipeline.hand_over()
        except BaseException:
            try:
                await frames.aclose()
                await self._owned.aclose()  # the run never started: release what it took over
            finally:
                self.__exit__()
            raise
        self.task = asyncio.get_running_loop().create_task(self._run(frames), name=f"response {self.id}")

    def _log(self, frames: list[Frame]) -> None:
        # The log's index is the event's sequence number; followers add `[DONE]` themselves.
        self.log.extend([frame_bytes(f) for f in frames if f is not DONE])

    async def _run(self, frames: AsyncGenerator[list[Frame], None]) -> None:
        try:
            async with self._owned:
                async for batch in frames:
                    self._log(batch)
        except BaseException:
            log.exception("background run %s failed", self.id)
            raise
        finally:
            self.log.close()
            self.__exit__()
