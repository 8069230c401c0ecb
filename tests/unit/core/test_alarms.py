"""core/alarms.py: the clocks every stream keeps (heartbeat, deadline, upstream clocks) share one
event-loop timer, and behave as `loop.call_at` handles do: due order, cancel, errors reported."""

from __future__ import annotations

import asyncio

from sluicegate.core.alarms import Alarm, alarm_at
from sluicegate.core.deadlines import Deadline
from sluicegate.engines.upstream.timeouts import Clocks

LIMIT = 10  # seconds: a safety net so a broken alarm fails the test instead of hanging it


def scheduled(loop: asyncio.AbstractEventLoop) -> int:
    """Timers armed on asyncio's own loop (what the tests run on), not cancelled."""
    return sum(1 for handle in loop._scheduled if not handle.cancelled())  # type: ignore[attr-defined]


async def until(condition: object) -> None:
    async with asyncio.timeout(LIMIT):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.001)


async def test_many_stream_clocks_arm_one_loop_timer() -> None:
    """What a held stream saves: 100 deadlines and 100 upstream clocks armed, one loop timer
    (with `loop.call_at` each they were 200)."""
    loop = asyncio.get_running_loop()
    before = scheduled(loop)
    deadlines = [Deadline(60, 30) for _ in range(100)]
    for deadline in deadlines:
        deadline.arm()
    clocks = [Clocks(first_byte=120, idle=30, total=None) for _ in range(100)]
    assert scheduled(loop) - before <= 1
    for deadline in deadlines:
        deadline.disarm()
    for clock in clocks:
        clock.stop()


async def test_alarms_fire_in_due_order_and_a_cancelled_one_never() -> None:
    loop = asyncio.get_running_loop()
    now = loop.time()
    fired: list[str] = []
    alarm_at(loop, now + 0.03, lambda: fired.append("c"))
    alarm_at(loop, now + 0.01, lambda: fired.append("a"))
    cancelled = alarm_at(loop, now + 0.02, lambda: fired.append("never"))
    alarm_at(loop, now + 0.02, lambda: fired.append("b"))
    cancelled.cancel()
    cancelled.cancel()  # twice: a no-op
    await until(lambda: len(fired) == 3)
    assert fired == ["a", "b", "c"]


async def test_a_callback_can_cancel_another_due_in_the_same_round() -> None:
    loop = asyncio.get_running_loop()
    now = loop.time()
    fired: list[str] = []
    second = alarm_at(loop, now, lambda: fired.append("second"))  # due with the first, after it

    def first() -> None:
        fired.append("first")
        second.cancel()

    alarm_at(loop, now - 1, first)
    alarm_at(loop, now + 0.01, lambda: fired.append("later"))
    await until(lambda: "later" in fired)
    assert fired == ["first", "later"]


async def test_a_callback_rearming_for_now_runs_in_a_later_round() -> None:
    """A clock that re-arms itself for a time already due (a beat that came a hair early) is
    called again after the round, not in a loop inside it."""
    loop = asyncio.get_running_loop()
    calls = 0

    def again() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            alarm_at(loop, loop.time(), again)

    alarm_at(loop, loop.time(), again)
    await until(lambda: calls == 3)


async def test_a_callback_arming_a_later_alarm_leaves_the_loop_nothing_to_report() -> None:
    """A round whose callback arms the next alarm (every deadline and heartbeat does) ends
    cleanly with that alarm's timer armed. Compiled, the round's last check read the timer it
    had cleared as None (mypy's narrowing) and raised a TypeError into the loop's handler each
    time a callback had armed one."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    fired: list[str] = []

    def first() -> None:
        fired.append("first")
        alarm_at(loop, loop.time() + 0.01, lambda: fired.append("second"))

    alarm_at(loop, loop.time(), first)
    alarm_at(loop, loop.time() + 5, lambda: fired.append("last"))  # keeps the heap non-empty
    try:
        await until(lambda: "second" in fired)
    finally:
        loop.set_exception_handler(None)
    assert reported == []


async def test_a_failing_callback_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    fired: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    now = loop.time()
    alarm_at(loop, now, broken)
    alarm_at(loop, now, lambda: fired.append("after"))
    try:
        await until(lambda: fired)
    finally:
        loop.set_exception_handler(None)
    assert isinstance(reported[0]["exception"], RuntimeError)


async def test_cancelled_alarms_do_not_pile_up() -> None:
    """Streams that end long before their clocks would fire leave nothing behind: cancelled
    entries are dropped once they outnumber the live ones."""
    loop = asyncio.get_running_loop()
    keep = alarm_at(loop, loop.time() + 3600, lambda: None)
    for _ in range(10_000):
        alarm_at(loop, loop.time() + 3600, lambda: None).cancel()
    clock = loop._sluicegate_alarms  # type: ignore[attr-defined]
    assert len(clock.heap) < 600
    keep.cancel()


async def test_each_loop_has_its_own_timer() -> None:
    fired: list[str] = []

    def in_other_loop() -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            alarm_at(loop, loop.time(), lambda: fired.append("other"))
            await asyncio.sleep(0.05)

        asyncio.run(main())

    loop = asyncio.get_running_loop()
    alarm_at(loop, loop.time() + 0.01, lambda: fired.append("this"))
    await asyncio.to_thread(in_other_loop)
    await until(lambda: "this" in fired)
    assert sorted(fired) == ["other", "this"]


async def test_alarms_due_at_once_fire_in_the_order_they_were_armed() -> None:
    """Ties in due time (common on uvloop, whose clock counts whole milliseconds) fire in
    arming order, as libuv's own timers do, among alarms due at other times."""
    loop = asyncio.get_running_loop()
    fired: list[int] = []
    when = loop.time() + 0.01
    alarms = [
        alarm_at(loop, when + (0.005 if n % 3 == 0 else 0.0), lambda n=n: fired.append(n))  # type: ignore[misc]
        for n in range(40)
    ]
    alarms[4].cancel()
    await until(lambda: len(fired) == 39)
    at_once = [n for n in range(40) if n % 3 and n != 4]
    assert fired == at_once + [n for n in range(40) if n % 3 == 0]


async def test_the_heap_holds_the_alarms_themselves() -> None:
    """A held stream keeps two or three alarms: the heap's entries are the alarms, their due
    time and arming order fields of their own (compiled: unboxed), not a tuple and a float and
    a count's int beside each (bench/README.md, gateway "Round sixteen")."""
    loop = asyncio.get_running_loop()
    armed = [alarm_at(loop, loop.time() + 3600, lambda: None) for _ in range(5)]
    clock = loop._sluicegate_alarms  # type: ignore[attr-defined]
    assert all(any(alarm is entry for entry in clock.heap) for alarm in armed)
    assert all(type(entry) is Alarm for entry in clock.heap)
    for alarm in armed:
        alarm.cancel()
