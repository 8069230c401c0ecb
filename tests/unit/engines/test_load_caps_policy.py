"""engines/load_caps.py through the lifecycle hooks: instances per model, and the memory cap that
evicts idle just-in-time loads first and otherwise refuses, with the models API's error."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import Failed, RawEvent, TextDelta
from sluicegate.core.request import ChatRequest, Message
from sluicegate.engines.base import ModelInfo
from sluicegate.engines.lifecycle import Lifecycle
from sluicegate.engines.load_caps import LoadCaps, instance_bytes, physical_memory
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry
from sluicegate.engines.scripted import Reply, Script, ScriptedEngine

LIMIT = 10  # seconds: a hang fails the test instead of blocking the suite
MB = 1 << 20


class Sized(ScriptedEngine):
    """A scripted engine whose model file has a size, like a GGUF."""

    def __init__(self, model_id: str, size: int) -> None:
        super().__init__(model_id, Script(replies=[Reply(content="one two three")]))
        self.size = size

    def info(self) -> ModelInfo:
        info = super().info()
        return dataclasses.replace(info, details={**info.details, "size_bytes": self.size})


def setup(sizes: dict[str, int], *, max_instances: int = 4, max_bytes: int = 0) -> Lifecycle:
    registry = Registry()
    for model_id, size in sizes.items():
        registry.add(
            Model(
                Sized(model_id, size),
                max_concurrency=4,
                max_queue=4,
                factory=lambda m=model_id, s=size: Sized(m, s),
            )
        )
    return Lifecycle(registry, jit_ttl=None, interval=60, caps=LoadCaps(max_instances, max_bytes))


def request(model_id: str) -> ChatRequest:
    return ChatRequest(model=model_id, messages=[Message("user", "hi")])


async def run(model: Model) -> list[RawEvent]:
    async with asyncio.timeout(LIMIT):
        return [event async for event in model.open(request(model.id)).events]


async def test_instances_per_model_stop_at_the_cap() -> None:
    life = setup({"a": MB}, max_instances=3)
    model = life.registry.models["a"]
    ids = [(await model.load(new_instance=True))[0].instance_id for _ in range(3)]
    assert ids == ["a", "a:2", "a:3"]
    for _ in range(3):
        with pytest.raises(SluicegateError) as refused:
            await model.load(new_instance=True)
        assert refused.value.info.kind is ErrorKind.INVALID_REQUEST
        assert "max_instances = 3" in refused.value.info.message
    assert len(model.instances) == 3  # a refused load leaves nothing behind
    await model.unload("a:3")
    assert (await model.load(new_instance=True))[0].loaded


async def test_configured_parallel_instances_are_never_refused() -> None:
    life = setup({"a": MB}, max_instances=0)
    model = life.registry.models["a"]
    for _ in range(10):
        await model.load(new_instance=True)
    assert len(model.instances) == 10  # 0: no cap


async def test_an_explicit_load_past_the_memory_cap_is_refused() -> None:
    life = setup({"a": 3 * MB, "b": 3 * MB}, max_bytes=5 * MB)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await a.load()
    with pytest.raises(SluicegateError) as refused:
        await b.load()
    assert refused.value.info.code == "max_loaded_model_bytes_reached"
    assert "max_loaded_model_bytes" in refused.value.info.message
    assert not b.loaded and a.loaded  # explicit loads are never evicted
    with pytest.raises(SluicegateError):
        await a.load(new_instance=True)  # another instance of `a` would not fit either
    assert len(a.instances) == 1


async def test_a_load_evicts_idle_jit_loads_least_recently_used_first() -> None:
    life = setup({"a": 2 * MB, "b": 2 * MB, "c": 2 * MB}, max_bytes=5 * MB)
    a, b, c = (life.registry.models[k] for k in "abc")
    await run(a)  # JIT: a
    await run(b)  # JIT: b (a was used earlier)
    assert a.loaded and b.loaded
    events = await run(c)
    assert any(isinstance(e, TextDelta) for e in events)
    assert c.loaded and b.loaded and not a.loaded  # `a` was the least recently used
    _, seconds = await a.load()  # an explicit load evicts an idle JIT load the same way
    assert a.loaded and not b.loaded and seconds >= 0


async def test_a_jit_load_that_cannot_fit_is_refused_before_it_starts() -> None:
    life = setup({"a": 4 * MB, "b": 4 * MB}, max_bytes=5 * MB)
    a, b = life.registry.models["a"], life.registry.models["b"]
    await a.load()  # explicit: stays
    with pytest.raises(SluicegateError) as refused:
        b.open(request("b"))
    assert refused.value.info.kind is ErrorKind.OVERLOADED
    assert not b.busy  # nothing was admitted


async def test_a_busy_jit_load_is_not_evicted() -> None:
    life = setup({"a": 3 * MB, "b": 3 * MB}, max_bytes=5 * MB)
    a, b = life.registry.models["a"], life.registry.models["b"]
    first = a.open(request("a")).events
    async with asyncio.timeout(LIMIT):
        async for event in first:
            if isinstance(event, TextDelta):
                break  # `a` is loaded just in time and busy
    with pytest.raises(SluicegateError):
        b.open(request("b"))
    await first.aclose()  # type: ignore[attr-defined]
    events = await run(b)  # idle now: evicted to make room
    assert not any(isinstance(e, Failed) for e in events)
    assert b.loaded and not a.loaded


def test_sizes_and_defaults() -> None:
    engine = Sized("a", 7)
    model = Model(engine, max_concurrency=1, max_queue=1)
    assert instance_bytes(model.instances[0]) == 7
    caps = LoadCaps.from_settings(4, None)
    assert caps.max_loaded_bytes == (physical_memory() or 0)
    assert LoadCaps.from_settings(4, 0).max_loaded_bytes == 0
