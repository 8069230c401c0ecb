"""The worker-thread-to-loop channel of the llamacpp engine, and its shared wake-ups.

A producer thread fills channels; consumers on an event loop see nothing until `flush`, then
everything, in order. On Linux the wake-up is an eventfd per loop (written with the GIL let
go); elsewhere, and on loops that cannot watch fds, `call_soon_threadsafe`. Both kinds of loop
the server may run (asyncio's and uvloop's).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator

import pytest
import uvloop

from sluicegate.engines.llamacpp import channel as channel_module
from sluicegate.engines.llamacpp.channel import Channel, Wakeups

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    loop = LOOPS[request.param]()
    try:
        yield loop
    finally:
        loop.close()


async def _drain(channel: Channel[int], into: list[list[int]]) -> None:
    async for batch in channel.batches():
        into.append(batch)


def _in_thread(work: Callable[[], None]) -> None:
    """Run `work` on another thread (the producer's side), and wait for it."""
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


async def _until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds (each turn of the loop, not a clock)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def test_consumers_see_nothing_until_flush_then_everything_in_order(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[list[list[int]], list[list[int]], list[list[int]], list[list[int]]]:
        wakeups = Wakeups()
        first: Channel[int] = Channel(asyncio.get_running_loop(), wakeups)
        second: Channel[int] = Channel(asyncio.get_running_loop(), wakeups)
        got_first: list[list[int]] = []
        got_second: list[list[int]] = []
        tasks = [
            asyncio.ensure_future(_drain(first, got_first)),
            asyncio.ensure_future(_drain(second, got_second)),
        ]
        for _ in range(5):
            await asyncio.sleep(0)  # both consumers wait now
        _in_thread(lambda: (first.put([1, 2]), second.put([10])))
        for _ in range(50):
            await asyncio.sleep(0)
        before = ([*got_first], [*got_second])  # put, not flushed: nobody was woken
        _in_thread(wakeups.flush)
        await _until(lambda: bool(got_first and got_second))
        _in_thread(lambda: (first.put([3]), first.close(), second.close(), wakeups.flush()))
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        _in_thread(wakeups.close)
        return before[0], before[1], got_first, got_second

    before_first, before_second, got_first, got_second = loop.run_until_complete(main())
    assert before_first == [] and before_second == []
    assert [x for batch in got_first for x in batch] == [1, 2, 3]
    assert got_second == [[10]]


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="eventfd is Linux's")
def test_one_eventfd_per_loop_closed_with_the_wakeups(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[int, list[int]]:
        wakeups = Wakeups()
        running = asyncio.get_running_loop()
        channels: list[Channel[int]] = [Channel(running, wakeups) for _ in range(3)]
        fds = list(wakeups._fds.values())
        got: list[list[int]] = []
        task = asyncio.ensure_future(_drain(channels[0], got))
        await asyncio.sleep(0)
        _in_thread(lambda: (channels[0].put([7]), channels[0].close(), wakeups.flush(), wakeups.close()))
        await asyncio.wait_for(task, 60)
        fd = fds[0]
        await _until(lambda: not _is_open(fd))  # the loop ran the detach: reader removed, fd closed
        return len(fds), [x for batch in got for x in batch]

    count, items = loop.run_until_complete(main())
    assert count == 1  # one per loop, however many channels
    assert items == [7]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="eventfd is Linux's")
def test_close_after_the_loop_closed_closes_the_fd_itself() -> None:
    wakeups = Wakeups()
    loop = asyncio.new_event_loop()

    async def attach() -> int:
        Channel(asyncio.get_running_loop(), wakeups)
        return next(iter(wakeups._fds.values()))

    fd = loop.run_until_complete(attach())
    loop.close()
    wakeups.close()
    assert not _is_open(fd)


def test_without_eventfd_the_loop_is_woken_by_call_soon_threadsafe(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_module, "_EVENTFD", False)

    async def main() -> list[list[int]]:
        wakeups = Wakeups()
        channel: Channel[int] = Channel(asyncio.get_running_loop(), wakeups)
        assert wakeups._fds == {}
        got: list[list[int]] = []
        task = asyncio.ensure_future(_drain(channel, got))
        await asyncio.sleep(0)
        _in_thread(lambda: (channel.put([1]), channel.close(), wakeups.flush()))
        await asyncio.wait_for(task, 60)
        wakeups.close()
        return got

    assert loop.run_until_complete(main()) == [[1]]
