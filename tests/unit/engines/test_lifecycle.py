"""engines/lifecycle.py: idle TTL and auto-evict, on scripted models and a fake clock (`reap(now)`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from loop_support import settled
from sluicegate.core.events import Finished, LoadFinished, LoadStarted, RawEvent, TextDelta
from sluicegate.core.request import ChatRequest, Message, RequestOptions
from sluicegate.engines.instances import Generation
from sluicegate.engines.lifecycle import Lifecycle
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry
from sluicegate.engines.scripted import Reply, Script, ScriptedEngine

LIMIT = 10  # seconds: a hang fails the test instead of blocking the suite
HOUR = 3600.0
WORDS = "one two three four five"


class GatedUnload(ScriptedEngine):
    """A scripted engine whose unload waits for `unload_gate`, to catch races with it."""

    def __init__(self, model_id: str, script: Script) -> None:
        super().__init__(model_id, script)
        self.unload_gate = asyncio.Event()
        self.unload_gate.set()
        self.loads = 0
        self.unloads = 0

    async def load(self, on_progress: Callable[[float], None]) -> None:
        self.loads += 1
        await super().load(on_progress)

    async def unload(self) -> None:
        self.unloads += 1
        await self.unload_gate.wait()


def model(model_id: str, *, ttl: float | None = None) -> Model:
    def engine() -> GatedUnload:
        return GatedUnload(model_id, Script(replies=[Reply(content=WORDS)]))

    return Model(engine(), max_concurrency=4, max_queue=4, factory=engine, ttl=ttl)


def setup(*ids: str, jit_ttl: float | None = HOUR, auto_evict: bool = False, **kw: Any) -> Lifecycle:
    registry = Registry()
    for model_id in ids:
        registry.add(model(model_id, **kw))
    return Lifecycle(registry, jit_ttl=jit_ttl, auto_evict=auto_evict, interval=0.01)


def request(model_id: str, ttl: float | None = None) -> ChatRequest:
    return ChatRequest(model=model_id, messages=[Message("user", "hi")], options=RequestOptions(ttl=ttl))


async def run(generation: Generation) -> list[RawEvent]:
    async with asyncio.timeout(LIMIT):
        return [event async for event in generation.events]


async def until_first_delta(events: AsyncIterator[RawEvent]) -> None:
    """Read up to the first text delta: the request is running and holds its instance busy."""
    async with asyncio.timeout(LIMIT):
        async for event in events:
            if isinstance(event, TextDelta):
                return
    raise AssertionError("the stream ended before any text")


async def until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(LIMIT):
        while not condition():
            await asyncio.sleep(0.001)


def count_reaper_rounds(life: Lifecycle) -> list[list[str]]:
    """What each of the reaper's rounds unloaded, one entry a round (wraps `life.reap`)."""
    rounds: list[list[str]] = []
    reap = life.reap

    async def counted(now: float | None = None) -> list[str]:
        rounds.append(await reap(now))
        return rounds[-1]

    life.reap = counted  # type: ignore[method-assign]
    return rounds


def engine_of(life: Lifecycle, model_id: str) -> GatedUnload:
    engine = life.registry.models[model_id].engine
    assert isinstance(engine, GatedUnload)
    return engine


# --- idle TTL --------------------------------------------------------------------------------


async def test_a_jit_load_is_unloaded_after_the_server_ttl_and_not_before() -> None:
    life = setup("a", jit_ttl=60)
    a = life.registry.models["a"]
    await run(a.open(request("a")))
    instance = a.instances[0]
    assert instance.loaded and instance.jit
    idle_since = instance.last_used
    assert await life.reap(idle_since + 59) == []
    assert instance.loaded
    assert await life.reap(idle_since + 60) == ["a"]
    assert not instance.loaded and engine_of(life, "a").unloads == 1
    assert instance.ttl is None and not instance.jit  # a later load starts afresh


async def test_a_busy_instance_is_never_unloaded_and_the_clock_restarts_when_it_ends() -> None:
    life = setup("a", jit_ttl=60)
    a = life.registry.models["a"]
    generation = a.open(request("a"))
    await until_first_delta(generation.events)
    assert await life.reap(time.monotonic() + 10 * HOUR) == []  # running: stays
    assert a.instances[0].loaded
    queued = a.open(request("a"))  # queued, not started: also busy
    await generation.events.aclose()  # type: ignore[attr-defined]
    assert await life.reap(time.monotonic() + 10 * HOUR) == []
    await run(queued)
    finished = time.monotonic()
    assert await life.reap(finished + 59) == []  # the idle clock started when it finished
    assert await life.reap(finished + 61) == ["a"]


async def test_request_ttl_beats_model_ttl_beats_server_ttl() -> None:
    life = setup("a", "b", jit_ttl=HOUR)
    life.registry.models["b"].ttl = 30
    a, b = life.registry.models["a"], life.registry.models["b"]
    await run(a.open(request("a", ttl=5)))
    await run(b.open(request("b")))
    now = time.monotonic()
    assert life.ttl_of(a, a.instances[0]) == 5
    assert life.ttl_of(b, b.instances[0]) == 30
    assert await life.reap(now + 6) == ["a"]
    assert await life.reap(now + 31) == ["b"]


async def test_the_listings_say_when_an_idle_instance_will_be_unloaded() -> None:
    life = setup("a", "b", jit_ttl=60)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await run(a.open(request("a")))  # loaded just in time: the server's TTL
    instance = a.instances[0]
    left = a.unloads_in(instance)
    assert left is not None and 0 < left <= 60
    instance.last_used -= 45  # idle for 45 s
    left = a.unloads_in(instance)
    assert left is not None and left <= 15
    instance.last_used -= 60
    assert a.unloads_in(instance) == 0  # due: the reaper's next round unloads it
    loaded, _ = await b.load(new_instance=False)  # loaded explicitly: stays
    assert b.unloads_in(loaded) is None


async def test_a_request_ttl_also_applies_to_an_instance_it_did_not_load() -> None:
    life = setup("a")
    a = life.registry.models["a"]
    await run(a.open(request("a")))
    await run(a.open(request("a", ttl=2)))
    assert a.instances[0].ttl == 2
    assert await life.reap(time.monotonic() + 3) == ["a"]


async def test_zero_server_ttl_keeps_jit_loads() -> None:
    life = setup("a", jit_ttl=0)
    a = life.registry.models["a"]
    await run(a.open(request("a")))
    assert await life.reap(time.monotonic() + 1000 * HOUR) == []
    assert a.loaded


async def test_zero_model_ttl_keeps_jit_loads_too() -> None:
    life = setup("a", jit_ttl=60)
    a = life.registry.models["a"]
    a.ttl = 0
    await run(a.open(request("a")))
    assert await life.reap(time.monotonic() + 1000 * HOUR) == []
    assert a.loaded


async def test_explicit_loads_have_no_ttl_unless_given_one() -> None:
    life = setup("a", jit_ttl=1)
    a = life.registry.models["a"]
    first, _ = await a.load()
    assert not first.jit and first.ttl is None
    second, _ = await a.load(new_instance=True, ttl=10)
    assert second.instance_id == "a:2" and second.ttl == 10
    now = time.monotonic()
    assert await life.reap(now + 5) == []
    assert await life.reap(now + 11) == ["a:2"]  # the extra instance goes away entirely
    assert [i.instance_id for i in a.instances] == ["a"]
    assert await life.reap(now + 1000 * HOUR) == []
    assert a.loaded


async def test_a_request_arriving_during_an_unload_loads_again_after_it() -> None:
    life = setup("a", jit_ttl=1)
    a = life.registry.models["a"]
    engine = engine_of(life, "a")
    await run(a.open(request("a")))
    engine.unload_gate.clear()
    reaping = asyncio.create_task(life.reap(time.monotonic() + 2))
    await until(lambda: engine.unloads == 1, "the unload started")
    assert not a.loaded  # from the first moment of the unload
    arriving = asyncio.create_task(run(a.open(request("a"))))
    await settled()
    assert engine.loads == 1 and not arriving.done()  # waits for the unload to finish
    engine.unload_gate.set()
    assert await reaping == ["a"]
    events = await arriving
    assert isinstance(events[0], LoadStarted) and isinstance(events[-1], Finished)
    assert engine.loads == 2 and a.loaded


# --- auto-evict ------------------------------------------------------------------------------


async def test_a_jit_load_evicts_the_previous_idle_jit_model_first() -> None:
    life = setup("a", "b", auto_evict=True)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await run(a.open(request("a")))
    assert a.loaded
    seen: list[bool] = []
    async with asyncio.timeout(LIMIT):
        async for event in b.open(request("b")).events:
            if isinstance(event, LoadFinished):
                seen.append(a.loaded)
    assert seen == [False]  # gone before b's load finished
    assert b.loaded and engine_of(life, "a").unloads == 1


async def test_auto_evict_waits_for_a_busy_model_then_evicts_it_once_idle() -> None:
    life = setup("a", "b", auto_evict=True)
    rounds = count_reaper_rounds(life)
    reaper = asyncio.create_task(life.run())
    try:
        a, b = life.registry.models["a"], life.registry.models["b"]
        streaming = a.open(request("a"))
        await until_first_delta(streaming.events)
        events = await run(b.open(request("b")))  # b loads anyway
        assert isinstance(events[0], LoadStarted) and isinstance(events[-1], Finished)
        assert a.loaded and b.loaded and a.instances[0].evict_when_idle
        seen = len(rounds)
        await until(lambda: len(rounds) >= seen + 3, "three more reaper rounds")
        assert a.loaded  # a is busy: it stays
        rest = [e async for e in streaming.events]
        assert isinstance(rest[-1], Finished)  # a's stream ran to the end, untouched
        await until(lambda: not a.loaded, "a is evicted once idle")
        assert b.loaded
    finally:
        reaper.cancel()


async def test_explicitly_loaded_models_are_not_evicted() -> None:
    life = setup("a", "b", auto_evict=True)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await a.load()
    await run(b.open(request("b")))
    assert a.loaded and b.loaded and not a.instances[0].evict_when_idle


async def test_without_auto_evict_jit_models_stay() -> None:
    life = setup("a", "b", auto_evict=False)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await run(a.open(request("a")))
    await run(b.open(request("b")))
    assert a.loaded and b.loaded


@pytest.mark.parametrize("first_is_busy", [False, True])
async def test_only_the_last_jit_model_survives_a_chain_of_loads(first_is_busy: bool) -> None:
    life = setup("a", "b", "c", auto_evict=True)
    reaper = asyncio.create_task(life.run())
    try:
        models = life.registry.models
        held = models["a"].open(request("a"))
        await until_first_delta(held.events)
        if not first_is_busy:
            await held.events.aclose()  # type: ignore[attr-defined]
        await run(models["b"].open(request("b")))
        await run(models["c"].open(request("c")))
        await until(lambda: not models["b"].loaded, "b is evicted by c")
        if first_is_busy:
            assert models["a"].loaded
            await held.events.aclose()  # type: ignore[attr-defined]
        await until(lambda: not models["a"].loaded, "a goes too")
        assert models["c"].loaded
    finally:
        reaper.cancel()


async def test_the_reaper_unloads_on_its_own() -> None:
    life = setup("a", jit_ttl=HOUR)
    reaper = asyncio.create_task(life.run())
    try:
        a = life.registry.models["a"]
        events = await run(a.open(request("a", ttl=1)))
        assert [e for e in events if isinstance(e, TextDelta)]
        await until(lambda: not a.loaded, "unloaded about a second after the request")
    finally:
        reaper.cancel()
