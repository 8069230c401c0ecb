"""A replayable frame log: one writer, any number of followers, late joiners included.

Background Responses streams write every event frame here (index = sequence number), so a
client that lost its connection can reconnect with `starting_after` and miss nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

DONE = b"data: [DONE]\n\n"


class FrameLog:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.closed = False
        self._signal = asyncio.Event()
        self._waiters = 0

    def extend(self, frames: list[bytes]) -> None:
        if frames:
            self.frames.extend(frames)
            self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            self._signal.set()
            self._signal = asyncio.Event()

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """Frames with index > `after`, then live ones, then `[DONE]` once the log closes."""
        position = max(after + 1, 0)
        while True:
            if position < len(self.frames):
                end = len(self.frames)
                yield b"".join(self.frames[position:end])
                position = end
                continue
            if self.closed:
                yield DONE
                return
            signal = self._signal
            self._waiters += 1
            try:
                await signal.wait()
            finally:
                self._waiters -= 1


async def replay(frames: list[bytes], after: int = -1) -> AsyncIterator[bytes]:
    """A finished, stored log replayed the same way."""
    if after + 1 < len(frames):
        yield b"".join(frames[max(after + 1, 0) :])
    yield DONE
