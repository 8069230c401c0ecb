"""A background run's frame log, kept in the store instead of unbounded memory.

One writer, any number of followers, late joiners included (it replaced an in-memory frame
log that grew without bound). Frames are written to the store in bounded
batches (`append_events`), so a run survives its connection and, as a record, its process;
memory holds only the frames not written yet (at most `batch_frames`, `extend` waits for the
store beyond that: backpressure, not growth).

    log = RunLog(store, response_id, scope=scope)    # after store.create_run(...)
    await log.extend(frames)                         # visible to local followers at once
    await log.finish(terminal_frames, final_record)  # durable first, then shown: followers
                                                     # see response.completed only once the
                                                     # record is stored (issue 13)
    log.follow(after)                                # bytes from `after` on, then DONE

Followers on other replicas use `store.follow_events`, which reads the same log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from sluicegate.store.base import DONE, Store, StoredResponse

log = logging.getLogger(__name__)


class RunLog:
    def __init__(
        self,
        store: Store,
        response_id: str,
        *,
        scope: str = "",
        first_seq: int = 0,
        batch_frames: int = 64,
        linger_seconds: float = 0.2,
    ) -> None:
        self.store = store
        self.id = response_id
        self.scope = scope
        self.batch_frames = batch_frames
        self.linger_seconds = linger_seconds  # how long a frame may wait for its batch
        self.closed = False
        self.ended = False  # `finish` stored the ending: the run is no longer in flight
        self._stored = first_seq  # frames before this sequence number are in the store
        self._pending: list[bytes] = []  # frames from `_stored` on, not written yet
        self._lock = asyncio.Lock()  # one batch in flight at a time, in order
        self._flusher: asyncio.Task[None] | None = None
        self._lingering = False  # the flusher is still waiting, nothing of its batch written
        self._signal = asyncio.Event()
        self._waiters = 0
        self._held: int | None = None  # followers stop here while terminal frames are stored

    @property
    def count(self) -> int:
        """The sequence number the next frame gets."""
        return self._stored + len(self._pending)

    async def extend(self, frames: list[bytes]) -> None:
        """Add frames; they reach the store within `linger_seconds` or a full batch."""
        if not frames:
            return
        if self.closed:
            raise RuntimeError(f"the log of {self.id} is closed")
        self._pending.extend(frames)
        self._wake()
        if len(self._pending) >= self.batch_frames:
            await self.flush()
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        self._lingering = True
        try:
            await asyncio.sleep(self.linger_seconds)
        finally:
            self._lingering = False
        try:
            await self.flush()
        except Exception:  # the writer's next extend/finish flushes (and raises) again
            log.warning("writing events of %s to the store failed; retrying with the next batch", self.id)

    async def flush(self) -> None:
        async with self._lock:
            while self._pending:
                batch = self._pending[: self.batch_frames]
                await self.store.append_events(self.id, self._stored, batch, scope=self.scope)
                del self._pending[: len(batch)]
                self._stored += len(batch)

    async def finish(self, frames: list[bytes], record: StoredResponse | None = None) -> None:
        """Store the terminal frames (and the final record), then show them and end the log.

        When the store fails this raises, and followers end without the terminal frames."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            # Only a flusher still lingering may be cancelled. A store write, once begun, completes
            # even when its caller is cancelled (a thread, a command already sent), and this log
            # would not count it: writing those frames again is refused, and the run would stay
            # in flight for good.
            if self._lingering:
                flusher.cancel()
            await asyncio.wait([flusher])  # without raising its cancellation as ours
        self._held = self.count
        try:
            await self.flush()
            if frames:
                async with self._lock:
                    await self.store.append_events(self.id, self._stored, frames, scope=self.scope)
                    self._stored += len(frames)
            if record is not None:
                await self.store.finish_run(record, scope=self.scope)
            self._held = None  # stored: now they may be shown
            self.ended = True
        finally:
            # Failed to store: followers end without the terminal frames, which never
            # became durable (a client must not be told `completed` of what is not stored).
            self.closed = True
            self._wake()

    def abort(self) -> None:
        """End followers now, storing nothing more: the writer is gone without `finish` (its
        task failed). A no-op once finished. The run stays in flight in the store until its
        process's recovery (or its lease) ends it as failed."""
        if not self.closed:
            self.closed = True
            self._held = None
            self._wake()

    def _wake(self) -> None:
        if self._waiters:
            self._signal.set()
            self._signal = asyncio.Event()

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """Frames with sequence number > `after`, then live ones, then DONE once finished."""
        position = max(after + 1, 0)
        while True:
            end = self.count if self._held is None else self._held
            if position < min(self._stored, end):
                frames = await self.store.events_after(self.id, position - 1, scope=self.scope)
                if frames is None:  # deleted while followed
                    yield DONE
                    return
                end = self.count if self._held is None else self._held  # may have moved meanwhile
                frames = frames[: max(end - position, 0)]
                if frames:
                    position += len(frames)
                    yield b"".join(frames)
                    continue
            if self._stored <= position < end:
                chunk = self._pending[position - self._stored : end - self._stored]
                position += len(chunk)
                yield b"".join(chunk)
                continue
            if self.closed and position >= end:
                yield DONE
                return
            signal = self._signal
            self._waiters += 1
            try:
                await signal.wait()
            finally:
                self._waiters -= 1
