"""llama.cpp's default sampler chain run in numpy (default_chain.py) against llama.cpp's own chain
as `LlamaRuntime._sampler` builds it: the same candidates with the same probabilities, and the
same token for the same seed, draw after draw; used only for a request whose chain is exactly
that one, on a large vocabulary."""

from __future__ import annotations

import asyncio
import ctypes
import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import llama_cpp
import numpy as np
import pytest

from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp.default_chain import DefaultChain, mt19937, top_k
from sluicegate.engines.llamacpp.runtime import (
    FAST_CHAIN_VOCAB,
    LlamaRuntime,
    _Samplers,
    default_chain_params,
    needs_numpy,
)

N_VOCAB = 262_144  # Gemma 3's
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
RUNTIME = SimpleNamespace(n_vocab=N_VOCAB, n_ctx=512, model=SimpleNamespace(vocab=None))
DEFAULT_NAMES = ["top-k", "top-p", "min-p", "temp", "dist"]

CHAINS = [
    SamplingParams(),  # llama.cpp's defaults: 40, 0.95, 0.05, 0.8
    SamplingParams(temperature=1.5, top_k=100, top_p=0.99, min_p=0.0),
    SamplingParams(temperature=0.3),
    SamplingParams(temperature=2.0, top_k=300, top_p=1.0, min_p=0.01),
    SamplingParams(temperature=1.0, top_k=1),
    SamplingParams(temperature=1.0, top_k=5000, top_p=0.5),  # top-k past the first spread
]


def llama_chain(sampling: SamplingParams, seed: int) -> Any:
    return LlamaRuntime._sampler(RUNTIME, sampling, seed)  # type: ignore[arg-type]


def names(chain: Any) -> list[str]:
    """The chain's samplers; llama.cpp names one that does nothing (top-p 1, min-p 0,
    temperature 1) "?name"."""
    count = llama_cpp.llama_sampler_chain_n(chain)
    return [
        llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain, i)).decode().lstrip("?")
        for i in range(count)
    ]


def fast_chain(sampling: SamplingParams, seed: int, n_vocab: int = N_VOCAB) -> DefaultChain:
    params = default_chain_params(sampling)
    assert params is not None
    return DefaultChain(params, seed, n_vocab)


def apply(chain: Any, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """llama_sampler_apply on a candidate array of every logit, as llama_sampler_sample makes
    it: the tokens kept (in llama.cpp's order), their probabilities, the token drawn."""
    data = np.zeros(len(logits), TOKEN_DATA)
    data["id"] = np.arange(len(logits))
    data["logit"] = logits
    array = llama_cpp.llama_token_data_array(
        data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), len(logits), -1, False
    )
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
    kept = data[: array.size]
    return kept["id"].copy(), kept["p"].copy(), int(kept["id"][array.selected])


def model_like(seed: int, n: int = N_VOCAB) -> np.ndarray:
    """Logits shaped like a language model's: a broad mass, a few tokens well above it."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(-2.0, 2.5, n).astype(np.float32)
    peaks = rng.choice(n, 12, replace=False)
    logits[peaks] = rng.uniform(8.0, 14.0, 12).astype(np.float32)
    return logits


@pytest.fixture(params=range(4), ids=lambda i: f"logits{i}")
def logits(request: pytest.FixtureRequest) -> np.ndarray:
    return model_like(request.param)


@pytest.mark.parametrize("sampling", CHAINS)
def test_the_same_candidates_and_probabilities_as_llama_cpps_chain(
    sampling: SamplingParams, logits: np.ndarray
) -> None:
    chain = llama_chain(sampling, 7)
    try:
        assert names(chain) == DEFAULT_NAMES
        ids, probs, _ = apply(chain, logits)
    finally:
        llama_cpp.llama_sampler_free(chain)
    fast = fast_chain(sampling, 7)
    our_ids, top = fast.candidates(logits)
    assert our_ids.tolist() == ids.tolist()  # the same tokens, best first
    np.testing.assert_allclose(fast.probabilities(top), probs, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("sampling", CHAINS)
def test_the_same_token_for_the_same_seed_draw_after_draw(sampling: SamplingParams) -> None:
    # One row with a single token left after min-p: llama.cpp still draws (and so must we), or
    # every later draw of the stream would differ.
    peaked = model_like(2)
    peaked[123] = 40.0
    rows = [model_like(0), model_like(1), peaked]
    for seed in (0, 1, 42, 2**31 + 5, 0xFFFFFFFE):
        chain = llama_chain(sampling, seed)
        fast = fast_chain(sampling, seed)
        try:
            theirs = [apply(chain, rows[i % 3])[2] for i in range(60)]
        finally:
            llama_cpp.llama_sampler_free(chain)
        assert [fast.sample(rows[i % 3]) for i in range(60)] == theirs
        assert len(set(theirs)) > 1 or sampling.top_k == 1  # the draws do differ


def test_a_seed_reproduces_and_another_differs() -> None:
    rows = [model_like(i) for i in range(3)]
    first = [fast_chain(SamplingParams(temperature=1.5), 11).sample(rows[i % 3]) for i in range(50)]
    again = [fast_chain(SamplingParams(temperature=1.5), 11).sample(rows[i % 3]) for i in range(50)]
    other = [fast_chain(SamplingParams(temperature=1.5), 12).sample(rows[i % 3]) for i in range(50)]
    assert first == again
    assert first != other


def test_the_random_stream_is_std_mt19937() -> None:
    # The C++ standard's check value: the 10,000th output of a default-constructed std::mt19937.
    assert int(mt19937(5489).random_raw(10_000)[-1]) == 4_123_659_995


def test_ties_at_the_kth_logit_keep_the_lowest_token_ids() -> None:
    logits = np.zeros(N_VOCAB, np.float32)
    logits[[900, 30, 70_000]] = [5.0, 3.0, 3.0]
    logits[[10, 20, 40_000]] = 1.0  # three tied for the last two places of the top 5
    ids, values = top_k(logits, 5)
    assert ids.tolist() == [900, 30, 70_000, 10, 20]
    assert values.tolist() == [5.0, 3.0, 3.0, 1.0, 1.0]
    flat = np.zeros(N_VOCAB, np.float32)  # nothing stands out: every logit is looked at
    assert top_k(flat, 3)[0].tolist() == [0, 1, 2]


CHAIN_CASES = [
    SamplingParams(),
    SamplingParams(top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.7, top_k=7),
    SamplingParams(repeat_penalty=1.3, repeat_last_n=0),  # no look-back: no penalties sampler
    SamplingParams(repeat_penalty=1.0, presence_penalty=0.0, typical_p=1.0, xtc_probability=0.0),
    SamplingParams(temperature=0),
    SamplingParams(repeat_penalty=1.1),
    SamplingParams(frequency_penalty=0.5),
    SamplingParams(presence_penalty=0.5),
    SamplingParams(logit_bias={5: -100.0}),
    SamplingParams(top_k=0),
    SamplingParams(typical_p=0.5),
    SamplingParams(top_n_sigma=1.5),
    SamplingParams(xtc_probability=0.5),
    SamplingParams(mirostat=2),
]


@pytest.mark.parametrize("sampling", CHAIN_CASES)
def test_only_llama_cpps_default_chain_is_replaced(sampling: SamplingParams) -> None:
    chain = llama_chain(sampling, 1)
    try:
        default = names(chain) == DEFAULT_NAMES
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert (default_chain_params(sampling) is not None) is default
    # numpy is imported for it on a large vocabulary only
    assert needs_numpy(sampling, None, N_VOCAB) is (default or sampling.temperature == 0)
    assert not needs_numpy(SamplingParams(), None, FAST_CHAIN_VOCAB - 1)


def test_dry_keeps_llama_cpps_chain() -> None:  # (its sampler needs a real vocabulary to build)
    assert default_chain_params(SamplingParams(dry_multiplier=0.8)) is None
    assert default_chain_params(SamplingParams(dry_multiplier=0.8, dry_penalty_last_n=0)) is not None


def test_the_samplers_use_it_on_a_large_vocabulary_only() -> None:
    def samplers(n_vocab: int, sampling: SamplingParams) -> _Samplers:
        runtime = SimpleNamespace(n_vocab=n_vocab, n_ctx=512, model=SimpleNamespace(vocab=None))
        runtime._sampler = lambda s, seed: LlamaRuntime._sampler(runtime, s, seed)  # type: ignore[arg-type]
        job = SimpleNamespace(sampling=sampling, seed=3, grammar=None, reasoning=None, in_reasoning=False)
        return _Samplers(runtime, job)  # type: ignore[arg-type]

    cases = [(N_VOCAB, SamplingParams(), True), (FAST_CHAIN_VOCAB - 1, SamplingParams(), False)]
    cases.append((N_VOCAB, SamplingParams(repeat_penalty=1.2), False))
    for n_vocab, sampling, fast in cases:
        built = samplers(n_vocab, sampling)
        try:
            assert (built.fast is not None) is fast
        finally:
            built.free()


@pytest.fixture(scope="module")
def gemma() -> Iterator[LlamaRuntime]:
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


def test_gemma_writes_the_same_tokens_as_with_llama_cpps_sampler(gemma: LlamaRuntime) -> None:
    """A walk through the real model: each step's token drawn by both, the same every time."""
    from sluicegate.engines.llamacpp.runtime import Job
    from sluicegate.parsing import PlainText

    sampling = SamplingParams(temperature=1.2)
    rng = random.Random(5)
    prompt = [rng.randrange(1000, 200_000) for _ in range(16)]
    job = Job(prompt, sampling, 0, PlainText(), lambda _events: None, ("test", None))
    assert gemma.prefill(job)
    chain, fast = gemma._sampler(sampling, 99), fast_chain(sampling, 99, gemma.n_vocab)
    try:
        walked = []
        for _ in range(32):
            token = llama_cpp.llama_sampler_sample(chain, gemma.context.ctx, -1)
            assert fast.sample(gemma.logits()) == token
            walked.append(token)
            gemma._decode([token])
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert len(set(walked)) > 1


@pytest.mark.parametrize("batching", [True, False], ids=["scheduler", "one-sequence"])
def test_a_seeded_chat_on_gemma_writes_what_llama_cpps_chain_writes(
    batching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the engine (the scheduler's `Sequence.accept`, the one-sequence loop): the numpy
    chain draws every token, and the seeded reply is the one llama.cpp's chain writes. A fresh
    engine each time: a prompt decoded the same way gives the same logits."""
    from engine_events import checked_reply
    from gemma_model import gemma_gguf_path
    from sluicegate.core.request import ChatRequest, Message
    from sluicegate.engines.llamacpp import runtime as runtime_module
    from sluicegate.engines.llamacpp.engine import LlamaCppEngine

    real = llama_cpp.llama_sampler_sample
    calls: list[int] = []

    def counted(*args: Any) -> int:
        calls.append(1)
        return int(real(*args))

    monkeypatch.setattr(llama_cpp, "llama_sampler_sample", counted)
    table = {"id": "g", "engine": "llamacpp", "path": str(gemma_gguf_path()), "context_length": 256}
    table |= {"threads": 2, "batch_size": 64, "batching": batching, "parallel": 2}

    async def reply() -> str:
        engine = LlamaCppEngine.from_config(table, Path("."))
        await engine.load(lambda _progress: None)
        try:
            sampling = SamplingParams(max_tokens=12, temperature=1.3, seed=2024)
            request = ChatRequest(model="g", messages=[Message("user", "Name a colour.")], sampling=sampling)
            return (await checked_reply(engine, request))[0]
        finally:
            await engine.unload()

    fast = asyncio.run(reply())
    assert calls == []  # every token drawn by the numpy chain
    monkeypatch.setattr(runtime_module, "FAST_CHAIN_VOCAB", 1 << 62)  # llama.cpp's chain
    theirs = asyncio.run(reply())
    assert calls  # llama.cpp's chain drew them
    assert fast == theirs and fast
