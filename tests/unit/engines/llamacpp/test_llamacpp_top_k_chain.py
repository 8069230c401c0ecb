"""A sampler chain that starts with top-k, fed the top k numpy finds (top_k_chain.py), against the
same chain given every logit as `llama_sampler_sample` does: the same candidates with the same
probabilities, and the same token for the same seed, draw after draw; used only for a request
whose chain starts with top-k, on a large vocabulary."""

from __future__ import annotations

import asyncio
import ctypes
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import llama_cpp
import numpy as np
import pytest

from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp.runtime import (
    FAST_CHAIN_VOCAB,
    LlamaRuntime,
    _Samplers,
    needs_numpy,
    top_k_first,
)
from sluicegate.engines.llamacpp.top_k_chain import TOKEN_DATA, TopKChain, top_k

N_VOCAB = 262_144  # Gemma 3's
RUNTIME = SimpleNamespace(n_vocab=N_VOCAB, n_ctx=512, model=SimpleNamespace(vocab=None))

CHAINS = [
    SamplingParams(),  # llama.cpp's defaults: 40, 0.95, 0.05, 0.8
    SamplingParams(temperature=1.5, top_k=100, top_p=0.99, min_p=0.0),
    SamplingParams(temperature=0.3),
    SamplingParams(temperature=2.0, top_k=300, top_p=1.0, min_p=0.01),
    SamplingParams(temperature=1.0, top_k=1),
    SamplingParams(temperature=1.0, top_k=5000, top_p=0.5),  # top-k past the first spread
    SamplingParams(temperature=0.9, typical_p=0.7),  # typical-p and XTC come after top-k
    SamplingParams(temperature=1.1, xtc_probability=0.9, xtc_threshold=0.05),
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


def fast_chain(chain: Any, sampling: SamplingParams, n_vocab: int = N_VOCAB) -> TopKChain:
    k = top_k_first(sampling)
    assert k is not None
    return TopKChain(chain, k, n_vocab)


def kept(array: Any) -> tuple[list[int], list[float], int]:
    """What a chain left in a candidate array: the tokens, their probabilities, the token drawn."""
    entries = [array.data[i] for i in range(array.size)]
    return [e.id for e in entries], [e.p for e in entries], entries[array.selected].id


def apply(chain: Any, logits: np.ndarray) -> tuple[list[int], list[float], int]:
    """llama_sampler_apply on a candidate array of every logit, as llama_sampler_sample makes
    it: the tokens kept (in llama.cpp's order), their probabilities, the token drawn."""
    data = np.zeros(len(logits), TOKEN_DATA)
    data["id"] = np.arange(len(logits))
    data["logit"] = logits
    array = llama_cpp.llama_token_data_array(
        data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), len(logits), -1, False
    )
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
    return kept(array)


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
    theirs, ours = llama_chain(sampling, 7), llama_chain(sampling, 7)
    try:
        assert names(theirs)[0] == "top-k"
        ids, probs, drawn = apply(theirs, logits)
        fast = fast_chain(ours, sampling)  # its buffer holds the candidates: kept alive
        our_ids, our_probs, our_drawn = kept(fast.apply(logits))
    finally:
        llama_cpp.llama_sampler_free(theirs)
        llama_cpp.llama_sampler_free(ours)
    assert our_ids == ids  # the same tokens, best first
    np.testing.assert_allclose(our_probs, probs, rtol=1e-6, atol=1e-9)
    assert our_drawn == drawn


@pytest.mark.parametrize("sampling", CHAINS)
def test_the_same_token_for_the_same_seed_draw_after_draw(sampling: SamplingParams) -> None:
    # One row with a single token left after min-p: llama.cpp still draws (and so must we), or
    # every later draw of the stream would differ.
    peaked = model_like(2)
    peaked[123] = 40.0
    rows = [model_like(0), model_like(1), peaked]
    for seed in (0, 1, 42, 2**31 + 5, 0xFFFFFFFE):
        chain, ours = llama_chain(sampling, seed), llama_chain(sampling, seed)
        try:
            theirs = [apply(chain, rows[i % 3])[2] for i in range(60)]
            fast = fast_chain(ours, sampling)
            assert [fast.sample(rows[i % 3]) for i in range(60)] == theirs
        finally:
            llama_cpp.llama_sampler_free(chain)
            llama_cpp.llama_sampler_free(ours)
        assert len(set(theirs)) > 1 or sampling.top_k == 1  # the draws do differ


def test_a_seed_reproduces_and_another_differs() -> None:
    rows = [model_like(i) for i in range(3)]

    def draws(seed: int) -> list[int]:
        sampling = SamplingParams(temperature=1.5)
        chain = llama_chain(sampling, seed)
        try:
            fast = fast_chain(chain, sampling)
            return [fast.sample(rows[i % 3]) for i in range(50)]
        finally:
            llama_cpp.llama_sampler_free(chain)

    assert draws(11) == draws(11)
    assert draws(11) != draws(12)


def test_ties_at_the_kth_logit_keep_the_lowest_token_ids() -> None:
    logits = np.zeros(N_VOCAB, np.float32)
    logits[[900, 30, 70_000]] = [5.0, 3.0, 3.0]
    logits[[10, 20, 40_000]] = 1.0  # three tied for the last two places of the top 5
    ids, values = top_k(logits, 5)
    assert ids.tolist() == [900, 30, 70_000, 10, 20]
    assert values.tolist() == [5.0, 3.0, 3.0, 1.0, 1.0]
    flat = np.zeros(N_VOCAB, np.float32)  # nothing stands out: every logit is looked at
    assert top_k(flat, 3)[0].tolist() == [0, 1, 2]


def test_a_peaked_row_finds_the_rest_of_its_top_k_below_the_spread() -> None:
    peaked = model_like(3)
    peaked[77] = 60.0  # alone within SPREAD of the top: the threshold comes from a sample
    ids, values = top_k(peaked, 40)
    assert ids.tolist() == np.argsort(-peaked, kind="stable")[:40].tolist()
    assert values.tolist() == np.sort(peaked)[::-1][:40].tolist()
    small = np.zeros(100, np.float32)
    small[[9, 50]] = [90.0, 1.0]
    assert top_k(small, 3)[0].tolist() == [9, 50, 0]  # fewer logits than a sample needs


CHAIN_CASES = [
    SamplingParams(),
    SamplingParams(top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.7, top_k=7),
    SamplingParams(repeat_penalty=1.3, repeat_last_n=0),  # no look-back: no penalties sampler
    SamplingParams(repeat_penalty=1.0, presence_penalty=0.0, typical_p=1.0, xtc_probability=0.0),
    SamplingParams(typical_p=0.5),
    SamplingParams(xtc_probability=0.5),
    SamplingParams(temperature=0),
    SamplingParams(repeat_penalty=1.1),
    SamplingParams(frequency_penalty=0.5),
    SamplingParams(presence_penalty=0.5),
    SamplingParams(logit_bias={5: -100.0}),
    SamplingParams(top_k=0),
    SamplingParams(top_n_sigma=1.5),
    SamplingParams(mirostat=2),
]


@pytest.mark.parametrize("sampling", CHAIN_CASES)
def test_only_a_chain_that_starts_with_top_k_gets_the_top_k(sampling: SamplingParams) -> None:
    chain = llama_chain(sampling, 1)
    try:
        first = names(chain)[0] == "top-k"
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert (top_k_first(sampling) is not None) is first
    # numpy is imported for it on a large vocabulary only
    assert needs_numpy(sampling, None, N_VOCAB) is (first or sampling.temperature == 0)
    assert not needs_numpy(SamplingParams(), None, FAST_CHAIN_VOCAB - 1)


def test_dry_keeps_llama_cpps_chain() -> None:  # (its sampler needs a real vocabulary to build)
    assert top_k_first(SamplingParams(dry_multiplier=0.8)) is None
    assert top_k_first(SamplingParams(dry_multiplier=0.8, dry_penalty_last_n=0)) == 40


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


def test_gemma_writes_the_same_tokens_as_with_llama_cpps_sampler(gemma_runtime: LlamaRuntime) -> None:
    """A walk through the real model: each step's token drawn by both, the same every time."""
    gemma = gemma_runtime
    from sluicegate.engines.llamacpp.runtime import Job
    from sluicegate.parsing import PlainText

    sampling = SamplingParams(temperature=1.2)
    rng = random.Random(5)
    prompt = [rng.randrange(1000, 200_000) for _ in range(16)]
    job = Job(prompt, sampling, 0, PlainText(), lambda _events: None, ("test", None))
    assert gemma.prefill(job)
    chain, ours = gemma._sampler(sampling, 99), gemma._sampler(sampling, 99)
    fast = fast_chain(ours, sampling, gemma.n_vocab)
    try:
        walked = []
        for _ in range(24):
            token = llama_cpp.llama_sampler_sample(chain, gemma.context.ctx, -1)
            assert fast.sample(gemma.logits()) == token
            walked.append(token)
            gemma._decode([token])
    finally:
        llama_cpp.llama_sampler_free(chain)
        llama_cpp.llama_sampler_free(ours)
    assert len(set(walked)) > 1


@pytest.mark.parametrize("batching", [True, False], ids=["scheduler", "one-sequence"])
def test_a_seeded_chat_on_gemma_writes_what_llama_cpps_chain_writes(
    batching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the engine (the scheduler's `Sequence.accept`, the one-sequence loop): the chain
    draws every token from the top k, and the seeded reply is the one llama.cpp's chain writes. A fresh
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
    assert calls == []  # every token drawn from the top k
    monkeypatch.setattr(runtime_module, "FAST_CHAIN_VOCAB", 1 << 62)  # llama.cpp's chain
    theirs = asyncio.run(reply())
    assert calls  # llama.cpp's chain drew them
    assert fast == theirs and fast
