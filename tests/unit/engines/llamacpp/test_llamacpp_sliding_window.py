"""A sliding-window model's KV cache follows the window, by llama.cpp's own numbers.

Gemma 3 270M (the real model, `gemma_model.py`): 15 of its 18 layers attend over a 512-token
window. llama.cpp's C default (`swa_full`) gives those layers the whole context too; the engine
turns that off. Measured by what llama.cpp reports, not by RSS: the cells it allocates per
layer type (its load log), the oldest position a sequence still holds
(`llama_memory_seq_pos_min`) and the bytes of a sequence's cells (`llama_state_seq_get_size`).
The price is prefix reuse: once the window has moved on, the cells before it are gone.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import NamedTuple

import llama_cpp
import pytest
from llama_cpp import _logger

from gemma_model import gemma_gguf_path
from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp import runtime as runtime_module
from sluicegate.engines.llamacpp.context import MIB
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.gguf_info import read_gguf_info
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime
from sluicegate.engines.llamacpp.settings import parse_settings
from sluicegate.parsing import PlainText

BATCH = 128  # the windowed layers keep the window plus one batch: 512 + 128 cells


@pytest.fixture(scope="module")
def gemma() -> Path:
    return gemma_gguf_path()


class Loaded(NamedTuple):
    runtime: LlamaRuntime
    kv_caches: list[tuple[int, int]]  # (cells per sequence, layers) of each KV cache llama.cpp made
    kv_mib: float  # the size llama.cpp reports for its KV caches, all of them together


@pytest.fixture(scope="module")
def loaded(gemma: Path) -> Iterator[Loaded]:
    runtime_module._init_backend()
    _logger.set_verbose(True)  # llama.cpp's load log, for the sizes of its KV caches
    log = io.StringIO()
    try:
        with redirect_stderr(log):
            # As the engine loads it with batching: several sequences of one context.
            runtime = LlamaRuntime(
                gemma,
                context_length=2048,
                n_gpu_layers=0,
                threads=2,
                batch_size=BATCH,
                flash_attention=None,
                on_progress=lambda _: None,
                sequences=2,
            )
    finally:
        _logger.set_verbose(False)
    caches = re.findall(
        r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers", log.getvalue()
    )
    yield Loaded(
        runtime,
        [(int(cells), int(layers)) for _, cells, layers in caches],
        sum(float(mib) for mib, _, _ in caches),
    )
    runtime.close()


@pytest.fixture(scope="module")
def runtime(loaded: Loaded) -> LlamaRuntime:
    return loaded.runtime


def _tokens(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 200_000) for _ in range(count)]


def _prefill(runtime: LlamaRuntime, tokens: list[int]) -> int:
    """Decode a prompt into sequence 0; the tokens taken from its cache."""
    job = Job(tokens, SamplingParams(), 0, PlainText(), lambda _events: None, ("test", None))
    assert runtime.prefill(job)
    return job.usage.cached_tokens


def _state_bytes(runtime: LlamaRuntime) -> int:
    return int(llama_cpp.llama_state_seq_get_size(runtime.context.ctx, 0))


class Filled(NamedTuple):
    runtime: LlamaRuntime
    prompt: list[int]  # in sequence 0's cache
    at_1024: int  # the sequence's state bytes after 1024 tokens
    at_1280: int  # and after 256 more


@pytest.fixture(scope="module")
def filled(runtime: LlamaRuntime) -> Filled:
    first, more = _tokens(1024, seed=1), _tokens(256, seed=2)
    _prefill(runtime, first)
    at_1024 = _state_bytes(runtime)
    assert _prefill(runtime, [*first, *more]) == 1024  # continued, not decoded again
    return Filled(runtime, [*first, *more], at_1024, _state_bytes(runtime))


def test_windowed_layers_keep_the_window_not_the_context(loaded: Loaded, filled: Filled) -> None:
    assert filled.runtime.n_swa == 512
    # Per sequence: the 3 full-attention layers hold the context, the 15 windowed ones the
    # window plus one batch (512 + 128 cells); a full-size cache would give them 2048 too.
    assert sorted(loaded.kv_caches) == [(768, 15), (2048, 3)]
    # 1280 tokens in: the windowed layers have reused the cells of the oldest positions.
    oldest = llama_cpp.llama_memory_seq_pos_min(filled.runtime.context.memory, 0)
    assert oldest >= 1280 - 768


def test_the_state_of_a_sequence_grows_by_the_full_attention_layers(filled: Filled, gemma: Path) -> None:
    per_token = read_gguf_info(gemma).kv_bytes_per_token  # all 18 layers
    assert per_token
    # Past the window, a token's keys and values stay in the 3 full-attention layers only.
    growth = (filled.at_1280 - filled.at_1024) / 256
    assert growth == pytest.approx(per_token * 3 / 18, rel=0.05)
    assert filled.at_1280 <= (1280 * 3 + 768 * 15) * per_token / 18 * 1.05


def test_a_prefix_the_window_has_left_is_decoded_again(filled: Filled) -> None:
    runtime, prompt = filled.runtime, filled.prompt
    # A prefix that ends inside the window (1280 - 512 < 1200) is reused.
    assert _prefill(runtime, [*prompt[:1200], *_tokens(20, seed=3)]) == 1200
    # One that ends long before: the windowed layers reused the cells before position 100 long
    # ago, so going on from there would attend over nothing. It is decoded again.
    assert _prefill(runtime, [*prompt[:100], *_tokens(50, seed=4)]) == 0


def test_the_kv_cache_estimate_is_what_llama_cpp_allocates(loaded: Loaded, gemma: Path) -> None:
    """What the model listing (and the budget that picks a default context and `parallel`)
    says the KV cache takes: llama.cpp's own figure for the same load, not every layer at the
    full context (2.7x here)."""

    def estimate(parallel: int) -> float:
        table = {"id": "g", "path": str(gemma), "context_length": 2048, "parallel": parallel}
        engine = LlamaCppEngine("g", parse_settings({**table, "batch_size": BATCH}, gemma.parent))
        kv_bytes: int = engine.info().details["context"]["kv_cache_bytes"]
        return kv_bytes / MIB

    assert estimate(2) == pytest.approx(loaded.kv_mib, rel=0.01)  # as loaded: two sequences
    # Each sequence has a stream of its own (not a unified cache): one is half of it.
    assert estimate(1) == pytest.approx(loaded.kv_mib / 2, rel=0.01)
