"""What the tests that run two tiny demo GGUFs under real llama.cpp share (speculative decoding,
context shift): the models, and engines loaded per test and closed at its end; and Gemma 3
270M's runtime, loaded once a module, for the tests that compare a sampler with llama.cpp's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_events import Reply, run_reply
from sluicegate.core.request import ChatRequest
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.runtime import LlamaRuntime


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, other): end of turn never sampled, so every reply runs to its limit; the other
    has another seed and the same vocabulary (a draft model that guesses wrong)."""
    folder = tmp_path_factory.mktemp("demo_pair")
    target = make_demo_gguf(folder / "tiny.gguf", ends_replies=False)
    other = make_demo_gguf(folder / "other.gguf", ends_replies=False, seed=1)
    return target, other


@pytest.fixture
def engine_defaults() -> dict[str, Any]:
    """The target's table under `loaded`, before a test's own keys (a module may override it)."""
    return {"batch_size": 64, "context_length": 512}


@pytest.fixture
def loaded(models: tuple[Path, Path], engine_defaults: dict[str, Any]) -> Iterator[Any]:
    """(**config) -> a loaded engine of the target, closed at the end; `.loop` runs on the
    engines' loop, `.run(engine, request)` runs a request there to its `Reply`, `.models`."""
    loop = asyncio.new_event_loop()
    engines: list[LlamaCppEngine] = []

    def make(**extra: Any) -> LlamaCppEngine:
        table = {"id": "s", "engine": "llamacpp", "path": str(models[0]), **engine_defaults}
        engine = LlamaCppEngine.from_config({**table, **extra}, Path("."))
        loop.run_until_complete(engine.load(lambda _: None))
        engines.append(engine)
        return engine

    def run(engine: LlamaCppEngine, request: ChatRequest) -> Reply:
        return loop.run_until_complete(run_reply(engine, request))

    make.loop = loop  # type: ignore[attr-defined]
    make.run = run  # type: ignore[attr-defined]
    make.models = models  # type: ignore[attr-defined]
    yield make
    for engine in engines:
        loop.run_until_complete(engine.aclose())
    loop.close()


@pytest.fixture(scope="module")
def gemma_runtime() -> Iterator[LlamaRuntime]:
    """Gemma 3 270M (its 262,144-token vocabulary) in one small context, closed at the module's end."""
    from gemma_model import gemma_gguf_path
    from sluicegate.engines.llamacpp import runtime as runtime_module

    runtime_module._init_backend()
    loaded = LlamaRuntime(
        gemma_gguf_path(),
        context_length=512,
        n_gpu_layers=0,
        threads=2,
        batch_size=64,
        flash_attention=None,
        on_progress=lambda _: None,
    )
    yield loaded
    loaded.close()
