"""What one request holds, released by one owner on every path.

The part of `contextlib.AsyncExitStack` the turn runner uses — release callbacks, handing them
all to a new owner, releasing last-taken first — kept as a list of plain tuples. An exit stack
costs a deque and a closure per callback, about 1.8 KiB for every open stream (tracemalloc);
this is a list and a tuple per callback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class Owned:
    """Release callbacks run once, in reverse order, by `aclose()` or leaving `async with`.

    A release that raises does not stop the others; the last error is raised once all have
    run (the earlier ones chained as its context), as `AsyncExitStack` does."""

    __slots__ = ("_releases",)

    def __init__(self) -> None:
        self._releases: list[tuple[Callable[..., Any], tuple[Any, ...], bool]] = []

    def callback(self, release: Callable[..., object], *args: Any) -> None:
        self._releases.append((release, args, False))

    def push_async_callback(self, release: Callable[..., Awaitable[object]], *args: Any) -> None:
        self._releases.append((release, args, True))

    def pop_all(self) -> Owned:
        """A new owner for everything held here; this one is left holding nothing."""
        taker = Owned()
        taker._releases, self._releases = self._releases, []
        return taker

    async def aclose(self) -> None:
        releases, self._releases = self._releases, []
        error: BaseException | None = None
        while releases:
            release, args, is_async = releases.pop()
            try:
                if is_async:
                    await release(*args)
                else:
                    release(*args)
            except BaseException as exc:
                if error is not None and exc.__context__ is None:
                    exc.__context__ = error
                error = exc
        if error is not None:
            raise error

    async def __aenter__(self) -> Owned:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
