"""FrameLog and replay: followers get every frame after their cursor exactly once, then [DONE]."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sluicegate.transport.replay import DONE, FrameLog, replay

FRAMES = [f"event: e\ndata: {i}\n\n".encode() for i in range(6)]


async def collect(frames: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in frames])


async def test_a_closed_log_is_followed_from_the_start() -> None:
    log = FrameLog()
    log.extend(FRAMES)
    log.close()
    assert await collect(log.follow()) == b"".join(FRAMES) + DONE


@pytest.mark.parametrize("after", [-5, -1, 0, 2, 5, 6, 100])
async def test_follow_and_replay_start_after_the_cursor(after: int) -> None:
    log = FrameLog()
    log.extend(FRAMES)
    log.close()
    expected = b"".join(FRAMES[max(after + 1, 0) :]) + DONE
    assert await collect(log.follow(after)) == expected
    assert await collect(replay(FRAMES, after)) == expected


async def test_a_live_follower_gets_frames_as_they_are_written() -> None:
    log = FrameLog()
    log.extend(FRAMES[:2])
    received: list[bytes] = []

    async def follow() -> None:
        async for chunk in log.follow(0):
            received.append(chunk)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0)
    assert received == [FRAMES[1]]
    log.extend(FRAMES[2:3])
    await asyncio.sleep(0)
    assert received == [FRAMES[1], FRAMES[2]]
    log.extend(FRAMES[3:5])
    log.extend(FRAMES[5:])  # two writes before the follower runs: both arrive, once each
    log.close()
    await asyncio.wait_for(task, 5)
    assert b"".join(received) == b"".join(FRAMES[1:]) + DONE
    assert received[-1] == DONE


async def test_many_followers_and_a_late_joiner_see_the_same_log() -> None:
    log = FrameLog()
    followers = [asyncio.create_task(collect(log.follow(after))) for after in (-1, -1, 3)]
    await asyncio.sleep(0)
    for frame in FRAMES:
        log.extend([frame])
        await asyncio.sleep(0)
    late = asyncio.create_task(collect(log.follow(1)))
    await asyncio.sleep(0)
    log.close()
    first, second, third = await asyncio.wait_for(asyncio.gather(*followers), 5)
    assert first == second == b"".join(FRAMES) + DONE
    assert third == b"".join(FRAMES[4:]) + DONE
    assert await asyncio.wait_for(late, 5) == b"".join(FRAMES[2:]) + DONE


async def test_an_empty_extend_wakes_nobody_and_a_follower_can_leave() -> None:
    log = FrameLog()
    follower = log.follow()
    waiting = asyncio.create_task(anext(follower))
    await asyncio.sleep(0)
    log.extend([])
    await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await follower.aclose()
    # The log keeps working for others after a follower left mid-wait.
    log.extend(FRAMES[:1])
    log.close()
    assert await collect(log.follow()) == FRAMES[0] + DONE


async def test_an_empty_closed_log_is_just_done() -> None:
    log = FrameLog()
    log.close()
    assert await collect(log.follow()) == DONE
    assert await collect(replay([])) == DONE
