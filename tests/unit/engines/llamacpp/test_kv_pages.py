"""A new context's KV cache is not resident until sequences write into it (kv_pages.py), and
what llama.cpp computes on it is the same to the last bit."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp import kv_pages
from sluicegate.engines.llamacpp.handles import Batch, Context, Model

CELLS = 8192  # the tiny demo model keeps 4 KiB a cell: a 32 MiB cache, one mapping of its own
KV_BYTES = CELLS * 4 * 1024


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    gguf = make_demo_gguf(tmp_path_factory.mktemp("kv") / "tiny.gguf", ends_replies=False)
    params = llama_cpp.llama_model_default_params()
    loaded = Model(path_model=str(gguf), params=params)
    yield loaded
    loaded.close()


def context(model: Model) -> Context:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = CELLS
    params.n_batch = params.n_ubatch = 64
    params.n_threads = params.n_threads_batch = 1
    return Context(model=model, params=params)


def test_a_new_context_holds_none_of_its_cleared_kv_cache(model: Model) -> None:
    before = rss_bytes()
    made = context(model)
    try:
        grown = rss_bytes() - before
        assert made.released >= KV_BYTES * 0.95
        assert grown < KV_BYTES / 4  # without the release: the whole cache, written with zeros
    finally:
        made.close()


def test_clearing_the_cache_hands_its_pages_back_again(model: Model) -> None:
    made = context(model)
    try:
        walk(made, model, list(range(3, 43)), 2)
        before = rss_bytes()
        made.clear_memory()  # llama.cpp writes zeros over the whole cache again
        assert rss_bytes() - before < KV_BYTES / 4
        assert walk(made, model, list(range(3, 43)), 2)  # and decodes on it
    finally:
        made.close()


def walk(made: Context, model: Model, prompt: list[int], steps: int) -> list[list[float]]:
    """Each step's logits: the prompt, then the argmax token `steps` times."""
    batch = Batch(n_tokens=64, embd=0, n_seq_max=1)
    n_vocab = model.n_vocab()
    rows = []
    try:
        tokens, past = prompt, 0
        for _ in range(steps + 1):
            batch.set_batch(tokens, past, logits_all=False)
            assert llama_cpp.llama_decode(made.ctx, batch.batch) == 0
            past += len(tokens)
            logits: Any = llama_cpp.llama_get_logits_ith(made.ctx, -1)
            row = list(ctypes.cast(logits, ctypes.POINTER(ctypes.c_float * n_vocab)).contents)
            rows.append(row)
            tokens = [max(range(n_vocab), key=row.__getitem__)]
    finally:
        batch.close()
    return rows


def test_decoding_on_released_pages_gives_the_same_logits(
    model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = [(7 * i) % 300 + 3 for i in range(40)]
    made = context(model)
    try:
        assert made.released
        released = walk(made, model, prompt, 12)
    finally:
        made.close()
    monkeypatch.setattr(kv_pages, "release_zero_chunks", lambda span, libc: 0)
    kept = context(model)
    try:
        assert not kept.released
        assert walk(kept, model, prompt, 12) == released
    finally:
        kept.close()


def test_only_large_writable_anonymous_mappings_are_candidates() -> None:
    maps = "\n".join(
        (
            "7f0000000000-7f0002000000 rw-p 00000000 00:00 0 ",  # 32 MiB, anonymous
            "7f1000000000-7f1000100000 rw-p 00000000 00:00 0 ",  # 1 MiB: the heap's size
            "7f2000000000-7f2002000000 r--p 00000000 08:01 1234 /models/a.gguf",
            "7f3000000000-7f3002000000 ---p 00000000 00:00 0 ",  # reserved, not writable
            "55d000000000-55d002000000 rw-p 00000000 00:00 0 [heap]",
        )
    )
    assert kv_pages.anonymous_spans(maps) == {(0x7F0000000000, 0x7F0002000000)}


def test_a_mapping_merged_with_an_older_one_is_cut_to_its_new_part() -> None:
    """The kernel merges a new anonymous mapping with its neighbour: the grown mapping's older
    part (another context's cache, a buffer another thread writes) is never a candidate."""
    older = "7f0002000000-7f0004000000 rw-p 00000000 00:00 0 \n"  # 32 MiB mapped before
    grown = "7f0000000000-7f0006000000 rw-p 00000000 00:00 0 \n"  # 32 MiB below it, 32 above
    assert kv_pages.new_spans(older, grown) == [
        (0x7F0000000000, 0x7F0002000000),
        (0x7F0004000000, 0x7F0006000000),
    ]
    assert kv_pages.new_spans(grown, grown) == []
    almost = "7f0000000000-7f0005f00000 rw-p 00000000 00:00 0 \n"  # all but its last 1 MiB
    assert kv_pages.new_spans(almost, grown) == []  # a new part below LARGE: not a cache
