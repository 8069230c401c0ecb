"""engines/instances.py, models.py, registry.py: admission (queue + concurrency), just-in-time
loading, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loop_support import settled
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    RawEvent,
    TextDelta,
)
from sluicegate.core.request import ChatRequest, ContentPart, Message, RequestOptions, Role
from sluicegate.core.segment import segment
from sluicegate.engines.base import Capabilities, Engine, LoadConfig, ModelInfo, ProgressCallback
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry
from sluicegate.observe.metrics import METRICS

LIMIT = 10  # seconds: a safety net so a hang fails the test instead of blocking the suite
_ids = iter(range(1_000_000))


class FakeEngine(Engine):
    """Streams "hi", then waits for `release` before finishing; loading waits for `load_gate`."""

    kind = "fake"

    def __init__(
        self,
        model_id: str,
        *,
        needs_load: bool = False,
        progress: tuple[float, ...] = (0.5, 1.0),
        vision: bool = False,
    ):
        super().__init__(model_id)
        self.needs_load = needs_load  # type: ignore[misc]
        self.progress = progress
        self.vision = vision
        self.release = asyncio.Event()
        self.load_gate = asyncio.Event()
        self.load_gate.set()
        self.load_calls = 0
        self.load_error: Exception | None = None
        self.load_configs: list[LoadConfig] = []  # what each load was configured with
        self.log: list[str] = []

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> FakeEngine:
        return cls(table["id"])

    def info(self) -> ModelInfo:
        return ModelInfo(id=self.model_id, engine=self.kind, capabilities=Capabilities(vision=self.vision))

    def configure_load(self, config: LoadConfig) -> None:
        self.load_configs.append(replace(config))

    async def load(self, on_progress: ProgressCallback) -> None:
        self.load_calls += 1
        await self.load_gate.wait()
        if self.load_error is not None:
            raise self.load_error
        for value in self.progress:
            on_progress(value)
            await asyncio.sleep(0)

    async def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        self.log.append("started")
        try:
            yield TextDelta(ItemKind.MESSAGE, "hi")
            await self.release.wait()
            yield Finished(FinishReason.STOP)
            self.log.append("finished")
        except asyncio.CancelledError:
            self.log.append("cancelled")
            raise
        except GeneratorExit:
            self.log.append("closed")
            raise


def unique(prefix: str) -> str:
    """Metrics are process-wide: give each test its own model id."""
    return f"{prefix}-{next(_ids)}"


def make(
    *, needs_load: bool = False, max_concurrency: int = 4, max_queue: int = 4, **kw: Any
) -> tuple[Model, FakeEngine]:
    engine = FakeEngine(unique("fake"), needs_load=needs_load, **kw)
    return Model(engine, max_concurrency=max_concurrency, max_queue=max_queue), engine


def request() -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")])


def with_options(**options: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], options=RequestOptions(**options))


async def until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(LIMIT):
        while not condition():
            await asyncio.sleep(0.001)
    assert condition(), what


async def collect(events: AsyncIterator[RawEvent]) -> list[RawEvent]:
    return [event async for event in events]


def counter(name: str, model_id: str) -> float:
    return METRICS.count(METRICS.key(name, model=model_id))


def gauge(name: str, model_id: str) -> float:
    return METRICS.gauges.get(METRICS.key(name, model=model_id), 0.0)


async def with_timeout(awaitable: Awaitable[Any]) -> Any:
    async with asyncio.timeout(LIMIT):
        return await awaitable


# --- admission --------------------------------------------------------------------------------


async def test_queue_full_is_overloaded_and_frees_up_again() -> None:
    model, engine = make(max_concurrency=1, max_queue=1)
    first = model.open(request())
    assert first.instance_id == model.id
    assert await with_timeout(anext(first.events)) == TextDelta(ItemKind.MESSAGE, "hi")  # holds the slot

    second = model.open(request())  # the queue has room
    second_task = asyncio.create_task(collect(second.events))
    await until(lambda: model.instances[0]._waiting == 1, "the second request waits for the slot")

    with pytest.raises(SluicegateError) as caught:
        model.open(request())
    info = caught.value.info
    assert info.kind is ErrorKind.OVERLOADED
    assert info.status == 503
    assert info.code == "server_overloaded"
    assert model.id in info.message

    engine.release.set()
    assert [type(e) for e in await collect(first.events)] == [Finished]
    assert [type(e) for e in await with_timeout(second_task)] == [TextDelta, Finished]
    assert not model.busy
    model.open(request())  # admitted again


async def test_max_queue_zero_refuses_as_soon_as_all_slots_are_busy() -> None:
    model, engine = make(max_concurrency=1, max_queue=0)
    first = model.open(request())  # a free slot admits even with no queue
    await with_timeout(anext(first.events))
    with pytest.raises(SluicegateError) as caught:
        model.open(request())
    assert caught.value.info.kind is ErrorKind.OVERLOADED
    engine.release.set()
    await collect(first.events)
    model.open(request())


async def test_max_concurrency_runs_that_many_at_once() -> None:
    model, engine = make(max_concurrency=2, max_queue=5)
    generations = [model.open(request()) for _ in range(3)]
    tasks = [asyncio.create_task(anext(g.events)) for g in generations]
    await until(lambda: engine.log.count("started") == 2, "two run at once")
    await until(lambda: model.instances[0]._waiting == 1, "the third waits for a slot")
    await settled()
    assert engine.log.count("started") == 2  # and it does not start while it waits
    assert gauge("sluicegate_generations_active", model.id) == 2
    engine.release.set()
    # the first two finish, which lets the third in
    for task, g in zip(tasks[:2], generations[:2], strict=True):
        await with_timeout(task)
        await collect(g.events)
    await with_timeout(tasks[2])
    await collect(generations[2].events)
    assert engine.log.count("finished") == 3
    assert gauge("sluicegate_generations_active", model.id) == 0


async def test_max_concurrency_zero_runs_everything_at_once_and_never_queues() -> None:
    """No cap (the `openai` engine's default): a gateway never holds requests back."""
    model, engine = make(max_concurrency=0, max_queue=0)
    generations = [model.open(request()) for _ in range(300)]
    assert not model.instances[0].full
    tasks = [asyncio.create_task(anext(g.events)) for g in generations]
    await until(lambda: engine.log.count("started") == 300, "all 300 run at once")
    assert model.instances[0]._waiting == 0
    engine.release.set()
    for task, g in zip(tasks, generations, strict=True):
        await with_timeout(task)
        await collect(g.events)
    assert gauge("sluicegate_generations_active", model.id) == 0


def test_upstream_models_are_not_capped_by_default() -> None:
    from sluicegate.engines.llamacpp import LlamaCppEngine
    from sluicegate.engines.upstream import OpenAIUpstreamEngine

    assert OpenAIUpstreamEngine.default_max_concurrency == 0
    assert LlamaCppEngine.default_max_concurrency == 1


async def test_engine_check_runs_at_open() -> None:
    model, _ = make()
    req = request()
    req.sampling.n = 3
    with pytest.raises(SluicegateError) as caught:
        model.open(req)
    assert caught.value.info.param == "n"


IMAGE = ContentPart("image", image_url="data:image/png;base64,iVBORw0KGgo=")


def with_image(*, role: Role = "user") -> ChatRequest:
    history = [Message("user", "hi"), Message("assistant", "hello")]
    return ChatRequest(
        model="m", messages=[*history, Message(role, [ContentPart("text", text="look"), IMAGE])]
    )


@pytest.mark.parametrize("role", ["user", "system"])
async def test_engine_check_refuses_images_for_a_model_without_vision(role: Role) -> None:
    model, engine = make()
    assert engine.info().capabilities.vision is False
    with pytest.raises(SluicegateError) as caught:
        model.open(with_image(role=role))  # an image anywhere in the conversation
    info = caught.value.info
    assert (info.kind, info.status, info.code, info.param) == (
        ErrorKind.INVALID_REQUEST,
        400,
        "image_input_unsupported",
        None,
    )
    assert repr(model.id) in info.message and "image" in info.message
    assert engine.log == []  # refused before anything ran
    # text in parts, without an image, is fine
    text_parts = ChatRequest(model="m", messages=[Message("user", [ContentPart("text", text="hi")])])
    engine.check(text_parts)


async def test_engine_check_accepts_images_for_a_model_with_vision() -> None:
    model, engine = make(vision=True)
    engine.check(with_image())
    engine.release.set()
    events = await collect(model.open(with_image()).events)
    assert events == [TextDelta(ItemKind.MESSAGE, "hi"), Finished(FinishReason.STOP)]


async def test_deltas_are_counted() -> None:
    model, engine = make()
    engine.release.set()
    await collect(model.open(request()).events)
    assert counter("sluicegate_engine_deltas_total", model.id) == 1


# --- just-in-time loading -----------------------------------------------------------------------


async def test_jit_load_events_only_for_the_request_that_triggered_it() -> None:
    model, engine = make(needs_load=True, max_concurrency=2)
    engine.release.set()
    engine.load_gate.clear()
    assert model.loaded is False

    first_task = asyncio.create_task(collect(model.open(request()).events))
    await until(lambda: engine.load_calls == 1, "the first request starts the load")
    second_task = asyncio.create_task(collect(model.open(request()).events))
    await settled()
    assert not second_task.done()  # waits for the load
    engine.load_gate.set()

    first = await with_timeout(first_task)
    second = await with_timeout(second_task)
    assert first[0] == LoadStarted(model.id)
    assert first[1:3] == [LoadProgress(0.5), LoadProgress(1.0)]
    assert isinstance(first[3], LoadFinished) and first[3].seconds >= 0
    assert [type(e) for e in first[4:]] == [TextDelta, Finished]
    assert [type(e) for e in second] == [TextDelta, Finished]  # no load events for the waiter
    assert engine.load_calls == 1
    assert model.loaded is True

    third = await collect(model.open(request()).events)
    assert [type(e) for e in third] == [TextDelta, Finished]
    assert engine.load_calls == 1


async def test_load_progress_is_clamped() -> None:
    model, engine = make(needs_load=True, progress=(-0.5, 0.3, 1.7))
    engine.release.set()
    events = await collect(model.open(request()).events)
    assert [e.progress for e in events if isinstance(e, LoadProgress)] == [0.0, 0.3, 1.0]


async def test_engine_without_load_has_no_load_events() -> None:
    model, engine = make(needs_load=False)
    engine.release.set()
    events = await collect(model.open(request()).events)
    assert not any(isinstance(e, LoadStarted | LoadProgress | LoadFinished) for e in events)
    assert engine.load_calls == 0


async def test_load_outlives_a_requester_that_goes_away() -> None:
    model, engine = make(needs_load=True)
    engine.release.set()
    engine.load_gate.clear()
    first = model.open(request())
    assert isinstance(await with_timeout(anext(first.events)), LoadStarted)
    await first.events.aclose()  # the client left while loading
    engine.load_gate.set()
    events = await collect(model.open(request()).events)
    assert engine.load_calls == 1  # the next request did not start over
    assert [type(e) for e in events if not isinstance(e, LoadProgress | LoadFinished)] == [
        TextDelta,
        Finished,
    ]
    assert model.loaded


async def test_failed_load_fails_the_request_and_is_retried_next_time() -> None:
    model, engine = make(needs_load=True)
    engine.release.set()
    engine.load_error = RuntimeError("out of memory")
    events = [e async for e in segment(model.open(request()).events)]
    assert isinstance(events[-1], Failed) and events[-1].error.kind is ErrorKind.ENGINE
    assert model.loaded is False
    assert not model.busy
    engine.load_error = None
    events = [e async for e in segment(model.open(request()).events)]
    assert isinstance(events[-1], Finished)
    assert engine.load_calls == 2
    assert model.loaded


async def test_explicit_load_and_second_instance() -> None:
    engines: list[FakeEngine] = []

    def factory() -> Engine:
        engine = FakeEngine(model_id, needs_load=True)
        engines.append(engine)
        return engine

    model_id = unique("multi")
    first_engine = FakeEngine(model_id, needs_load=True)
    model = Model(first_engine, max_concurrency=1, max_queue=0, factory=factory)
    instance, seconds = await model.load()
    assert instance.instance_id == model_id and seconds >= 0 and model.loaded
    second, _ = await model.load(new_instance=True)
    assert second.instance_id == f"{model_id}:2"
    assert [i.instance_id for i in model.instances] == [model_id, f"{model_id}:2"]

    # the first instance is busy (and has no queue): the next request goes to the idle one
    busy = model.open(request())
    await with_timeout(anext(busy.events))
    other = model.open(request())
    assert other.instance_id == f"{model_id}:2"
    first_engine.release.set()
    engines[0].release.set()
    await collect(busy.events)
    await collect(other.events)

    assert await model.unload(f"{model_id}:2") == [f"{model_id}:2"]
    assert [i.instance_id for i in model.instances] == [model_id]


# --- load config: context_length -----------------------------------------------------------------


async def test_the_request_that_loads_just_in_time_loads_with_its_context_length() -> None:
    model, engine = make(needs_load=True)
    engine.release.set()
    await collect(model.open(with_options(context_length=512)).events)
    assert engine.load_configs == [LoadConfig(context_length=512)]
    assert model.instances[0].config == LoadConfig(context_length=512)  # shown in the listings
    await collect(model.open(with_options(context_length=128)).events)  # loaded: no reload
    assert engine.load_calls == 1
    await model.unload()
    assert model.instances[0].config == LoadConfig()
    await collect(model.open(request()).events)  # the next JIT load starts from the defaults
    assert engine.load_configs[-1] == LoadConfig()


async def test_a_request_waiting_for_anothers_load_does_not_change_its_config() -> None:
    model, engine = make(needs_load=True, max_concurrency=2)
    engine.release.set()
    engine.load_gate.clear()
    first = asyncio.create_task(collect(model.open(with_options(context_length=512)).events))
    await until(lambda: engine.load_calls == 1, "the first request is loading")
    second = asyncio.create_task(collect(model.open(with_options(context_length=64)).events))
    await until(lambda: model.instances[0]._active == 2, "the second request waits for the load")
    engine.load_gate.set()
    await with_timeout(asyncio.gather(first, second))
    assert engine.load_configs == [LoadConfig(context_length=512)]
    assert model.instances[0].config.context_length == 512


async def test_an_explicit_load_uses_its_config() -> None:
    model, engine = make(needs_load=True)
    instance, _ = await model.load(config=LoadConfig(context_length=1024))
    assert engine.load_configs == [LoadConfig(context_length=1024)]
    assert instance.config.context_length == 1024


# --- cancellation --------------------------------------------------------------------------------


async def test_cancellation_counts_and_releases_the_slot() -> None:
    model, engine = make(max_concurrency=1, max_queue=0)
    before = counter("sluicegate_generations_cancelled_total", model.id)
    generation = model.open(request())

    async def consume() -> None:
        async for _ in generation.events:
            pass

    task = asyncio.create_task(consume())
    await until(lambda: "started" in engine.log, "the engine started")
    await settled()  # now parked in `release.wait()`
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await with_timeout(task)

    assert engine.log[-1] == "cancelled"  # the engine observed it
    assert counter("sluicegate_generations_cancelled_total", model.id) == before + 1
    assert not model.busy
    assert gauge("sluicegate_generations_active", model.id) == 0
    # the slot is free: with max_queue 0 this would be refused otherwise
    engine.release.set()
    events = await collect(model.open(request()).events)
    assert [type(e) for e in events] == [TextDelta, Finished]


async def test_closing_the_stream_counts_as_cancelled_and_releases_the_slot() -> None:
    model, engine = make(max_concurrency=1, max_queue=0)
    before = counter("sluicegate_generations_cancelled_total", model.id)
    generation = model.open(request())
    await with_timeout(anext(generation.events))
    await generation.events.aclose()
    assert engine.log[-1] == "closed"
    assert counter("sluicegate_generations_cancelled_total", model.id) == before + 1
    assert not model.busy
    model.open(request())


async def test_completed_generation_is_not_counted_as_cancelled() -> None:
    model, engine = make()
    engine.release.set()
    await collect(model.open(request()).events)
    assert counter("sluicegate_generations_cancelled_total", model.id) == 0


async def test_cancelled_while_queued_frees_the_queue_place() -> None:
    model, engine = make(max_concurrency=1, max_queue=1)
    first = model.open(request())
    await with_timeout(anext(first.events))
    queued = asyncio.create_task(collect(model.open(request()).events))
    # admitted requests count as waiting at once; wait until this one really waits for a slot
    await until(lambda: len(model.instances[0]._slots._waiters or ()) == 1, "queued")
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await with_timeout(queued)
    assert model.instances[0]._waiting == 0
    model.open(request())  # the queue place is free again
    assert engine.log.count("started") == 1  # the queued one never reached the engine
    engine.release.set()
    await collect(first.events)


# --- registry --------------------------------------------------------------------------------------


def test_registry_get_unknown_model() -> None:
    registry = Registry()
    model, _ = make()
    registry.add(model)
    assert registry.get(model.id) is model
    with pytest.raises(SluicegateError) as caught:
        registry.get("nope")
    info = caught.value.info
    assert (info.kind, info.status, info.param, info.code) == (
        ErrorKind.NOT_FOUND,
        404,
        "model",
        "model_not_found",
    )
    assert model.id in info.message
    assert registry.find_instance(model.id) == (model, model.instances[0])
    assert registry.find_instance("nope") is None


async def test_a_burst_of_admissions_cannot_overrun_the_queue() -> None:
    model, engine = make(max_concurrency=1, max_queue=2)
    first = model.open(request())
    await with_timeout(anext(first.events))  # holds the only slot
    admitted = [model.open(request()), model.open(request())]  # not iterated yet
    with pytest.raises(SluicegateError) as caught:
        model.open(request())
    assert caught.value.info.kind is ErrorKind.OVERLOADED
    for generation in admitted:
        await generation.aclose()
    assert model.instances[0]._waiting == 0
    engine.release.set()
    await collect(first.events)


async def test_an_unstarted_generation_closed_by_its_owner_gives_its_queue_place_back() -> None:
    model, engine = make(max_concurrency=1, max_queue=1)
    first = model.open(request())
    await with_timeout(anext(first.events))  # holds the only slot
    unstarted = model.open(request())  # takes the only queue place, never iterated
    with pytest.raises(SluicegateError) as caught:
        model.open(request())
    assert caught.value.info.kind is ErrorKind.OVERLOADED
    await unstarted.aclose()  # what a turn that fails before its first event does
    assert model.instances[0]._waiting == 0
    again = model.open(request())  # the place is free again
    await again.aclose()
    await again.aclose()  # closing twice is harmless
    assert model.instances[0]._waiting == 0
    assert engine.log.count("started") == 1  # the closed ones never reached the engine
    engine.release.set()
    await collect(first.events)
    await first.aclose()  # closing after iterating is harmless too
    assert not model.busy
    assert gauge("sluicegate_generations_active", model.id) == 0
