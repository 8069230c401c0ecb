"""engines/instances.py: a task that is not a chat (`run`: embeddings, rerank; `slot`: speech)
waits for a slot like a generation, and gives its queue place back however it leaves."""

from __future__ import annotations

import asyncio

import pytest

from sluicegate.engines.base import Engine
from sluicegate.engines.instances import Instance
from sluicegate.engines.scripted import Reply, Script, ScriptedEngine

LIMIT = 10  # seconds: a hang fails the test instead of blocking the suite


def instance() -> Instance:
    engine = ScriptedEngine("m", Script(replies=[Reply(content="hi")]))
    return Instance(engine, "m", max_concurrency=1, max_queue=4)


async def _held(target: Instance, entered: asyncio.Event, leave: asyncio.Event, how: str) -> None:
    async def work(_: Engine) -> None:
        entered.set()
        await leave.wait()

    if how == "run":
        await target.run(work)
    else:
        async with target.slot():
            await work(target.engine)


@pytest.mark.parametrize("how", ["run", "slot"])
async def test_a_task_cancelled_while_queued_gives_its_place_back(how: str) -> None:
    target = instance()
    entered, leave = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(_held(target, entered, leave, how))
    async with asyncio.timeout(LIMIT):
        await entered.wait()
    queued = asyncio.create_task(_held(target, asyncio.Event(), leave, how))
    async with asyncio.timeout(LIMIT):
        while target.pending < 2:  # the second waits for the one slot
            await asyncio.sleep(0.001)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert target.pending == 1 and target.busy  # the first still runs; the place is back
    leave.set()
    async with asyncio.timeout(LIMIT):
        await first
    assert target.pending == 0 and not target.busy


@pytest.mark.parametrize("how", ["run", "slot"])
async def test_a_task_that_ends_gives_its_slot_to_the_next(how: str) -> None:
    target = instance()
    leave = asyncio.Event()
    leave.set()
    async with asyncio.timeout(LIMIT):
        await asyncio.gather(*(_held(target, asyncio.Event(), leave, how) for _ in range(3)))
    assert target.pending == 0 and not target.busy
