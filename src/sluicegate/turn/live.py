"""Stored turns while they are being generated: foreground ones and background runs.

A live turn is what `GET /v1/responses/{id}` shows before the record is stored, what
`previous_response_id` must wait for, and what DELETE and `/cancel` stop. A background run is a
live turn with a task and a store-backed frame log of its own: it owns the turn's resources
(taken over from the request that started it), outlives any connection and, as a stored run,
its process; it can be followed from any event on, from any replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.owned import Owned
from sluicegate.dialects.base import Encoder
from sluicegate.store.base import Store, StoredResponse, StoreUnavailable
from sluicegate.store.runlog import RunLog
from sluicegate.transport.sse import frame_bytes
from sluicegate.turn.pipeline import Frames, TurnPipeline

log = logging.getLogger(__name__)
Json = dict[str, Any]
# How soon a run the store could not fail is tried again (doubling up to the maximum).
ABANDON_RETRY_SECONDS = 0.1
ABANDON_RETRY_MAX_SECONDS = 10.0
TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete"})
# What a snapshot says between the turn's end and its record being stored: still running.
_NOT_ENDED_YET = {
    "status": "in_progress",
    "completed_at": None,
    "usage": None,
    "error": None,
    "incomplete_details": None,
}


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
        *,
        scope: str = "",
    ) -> None:
        self.id = turn_id
        self.scope = scope  # whose turn it is: lookups by id must check it (`AppState.live_turn`)
        self.input_items = input_items or []
        self.pipeline = pipeline
        self.encoder = encoder
        self._live = live
        self.finished = False
        # How it ended may be shown: its record is stored, or never will be (the store refused
        # it and the turn is given up as failed). Until then a client told `completed` could
        # lose it to a crash (docs/storage.md, "Stored before it is said").
        self.settled = False
        self._done: asyncio.Event | None = None  # made by the first `wait()`: most turns have none

    def __enter__(self) -> LiveTurn:
        self._live[self.id] = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.pop(self.id, None)
        self.finished = True
        self.settled = True  # over: a GET reads the store now; `wait()` says how it ended
        if self._done is not None:
            self._done.set()

    def stored(self) -> None:
        """The persister stored the turn's final record."""
        self.settled = True

    def response_object(self) -> Json:
        """The encoder's object as it is, ended or not."""
        return self.encoder.response_object() or {}

    def snapshot(self) -> Json:
        """The object a client may be shown: never a terminal status before it is settled."""
        response = self.response_object()
        if self.settled or response.get("status") not in TERMINAL:
            return response
        return {**response, **_NOT_ENDED_YET}

    def cancel(self, reason: str) -> None:
        self.pipeline.cancel(reason)

    async def wait(self) -> Json:
        if not self.finished:
            if self._done is None:
                self._done = asyncio.Event()
            await self._done.wait()
        return self.snapshot()


class BackgroundRun(LiveTurn):
    """A turn run by a task of its own, its frames kept in a store-backed log clients follow.

    Stored from acceptance (`store.create_run`: `queued`, its input items findable), its event
    frames written to the store in bounded batches as it goes (`RunLog`), its terminal frames
    and final record stored before any follower sees them (`RunLog.finish`, called by the
    runner's persister). A process killed mid-run leaves a record that the next start (SQLite)
    or another replica (Redis, once the lease expires) finishes as `failed`.
    """

    background = True

    def __init__(
        self,
        turn_id: str,
        pipeline: TurnPipeline,
        encoder: Encoder,
        live: dict[str, LiveTurn],
        owned: Owned,
        input_items: list[Json] | None = None,
        *,
        store: Store,
        scope: str,
        accepted: Callable[[Json], StoredResponse],
    ) -> None:
        super().__init__(turn_id, pipeline, encoder, live, input_items, scope=scope)
        self.store = store
        self.log = RunLog(store, turn_id, scope=scope)
        self._accepted = accepted  # the record to store at acceptance, from the queued snapshot
        self._owned = owned  # everything the turn holds; released when the run ends
        self._status = ""  # the status the store has for the run in flight
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Register, store the run (`queued` from here on) with its opening frames, then let a
        task of its own run the rest. Nothing is answered before the run is durable."""
        self._live[self.id] = self
        frames = self.pipeline.frames()
        try:
            opening = await anext(frames)  # only the encoder's opening: no engine work yet
            snapshot = self.snapshot()
            await self.store.create_run(self._accepted(snapshot), scope=self.scope)
            self._status = str(snapshot.get("status", ""))
            await self._log(opening)
            self.pipeline.hand_over()
        except BaseException:
            try:
                await frames.aclose()
                await self._owned.aclose()  # the run never started: release what it took over
            finally:
                self.__exit__()
            raise
        self.task = asyncio.get_running_loop().create_task(self._run(frames), name=f"response {self.id}")

    async def _log(self, frames: list[Frame]) -> None:
        # The log's index is the event's sequence number; followers add `[DONE]` themselves.
        # Once finished (terminal frames stored by the persister, or the store failed), the
        # pipeline's last frames are already in the log, or must not claim a stored record.
        if self.log.closed:
            return
        await self.log.extend([frame_bytes(f) for f in frames if f is not DONE])
        response = self.response_object()
        status = str(response.get("status", ""))
        if status != self._status and status in ("queued", "in_progress"):
            # Other replicas read the snapshot of a run in flight from the store.
            self._status = status
            await self.store.update_run(self.id, response, scope=self.scope)

    async def _run(self, frames: Frames) -> None:
        try:
            try:
                async with self._owned:
                    try:
                        async for batch in frames:
                            await self._log(batch)
                    finally:
                        await frames.aclose()
            except asyncio.CancelledError:
                raise  # the server is stopping: its store's recovery ends the run
            except SluicegateError as exc:  # the store could not take the run's state
                log.warning("background run %s failed: %s (%s)", self.id, exc, getattr(exc, "detail", ""))
                self.pipeline.fail(exc.info)
            except Exception:
                log.exception("background run %s failed", self.id)
                self.pipeline.fail(
                    ErrorInfo(ErrorKind.INTERNAL, "The server had an error while running this response.")
                )
            self.log.abort()  # followers end now (a no-op when the persister finished it)
            self.settled = True  # stored, or failed for good here: `_abandon` tells the store
            await self._abandon()
        finally:
            self.log.abort()
            self.__exit__()

    async def _abandon(self) -> None:
        """A run that ended without its ending stored is failed in the store, with the error it
        shows here: else it stays in flight, and its followers wait, until the process restarts.
        While the store cannot take even that, the run stays live here (a GET shows it failed)
        and it is retried until the store can say so."""
        if self.log.ended:
            return
        response = self.response_object()
        error = response.get("error") if response.get("status") == "failed" else None
        delay = ABANDON_RETRY_SECONDS
        while True:
            try:
                await self.store.abandon_run(self.id, scope=self.scope, error=error)
                return
            except StoreUnavailable as exc:
                log.warning(
                    "giving up background run %s: the store is unavailable (%s); retrying",
                    self.id,
                    exc.detail,
                )
            except Exception:
                log.exception("giving up background run %s failed", self.id)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, ABANDON_RETRY_MAX_SECONDS)
