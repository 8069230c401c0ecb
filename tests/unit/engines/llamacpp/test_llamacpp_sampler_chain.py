"""The llama.cpp sampler chain a request's sampling builds (`LlamaRuntime._sampler`): which of
llama.cpp's own samplers run, in llama.cpp's order — logit bias first (greedy obeys it too),
penalties over `repeat_last_n` tokens, typical-p after top-k."""

from __future__ import annotations

from types import SimpleNamespace

import llama_cpp
import pytest

from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp.runtime import LlamaRuntime, _greedy

RUNTIME = SimpleNamespace(n_vocab=1000, n_ctx=512, model=SimpleNamespace(vocab=None))


def chain(sampling: SamplingParams) -> list[str]:
    built = LlamaRuntime._sampler(RUNTIME, sampling, 1)  # type: ignore[arg-type]
    try:
        return [
            llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(built, i)).decode()
            for i in range(llama_cpp.llama_sampler_chain_n(built))
        ]
    finally:
        llama_cpp.llama_sampler_free(built)


def test_the_default_chain() -> None:
    assert chain(SamplingParams()) == ["top-k", "top-p", "min-p", "temp", "dist"]


def test_logit_bias_comes_first_even_when_greedy() -> None:
    biased = SamplingParams(temperature=0, logit_bias={5: -100.0})
    assert chain(biased) == ["logit-bias", "greedy"]
    assert not _greedy(biased)  # the argmax shortcut would skip the bias
    assert _greedy(SamplingParams(temperature=0))


def test_typical_p_after_top_k() -> None:
    assert chain(SamplingParams(typical_p=0.5)) == ["top-k", "typical", "top-p", "min-p", "temp", "dist"]
    assert "typical" not in chain(SamplingParams(typical_p=1.0))  # 1: off


@pytest.mark.parametrize(("last_n", "penalised"), [(None, True), (32, True), (-1, True), (0, False)])
def test_repeat_last_n(last_n: int | None, penalised: bool) -> None:
    names = chain(SamplingParams(repeat_penalty=1.3, repeat_last_n=last_n))
    assert ("penalties" in names) is penalised


def test_top_n_sigma_and_xtc_in_llama_cpps_order() -> None:
    names = chain(SamplingParams(top_n_sigma=1.5, xtc_probability=0.5, typical_p=0.5))
    assert names == ["top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp", "dist"]
    assert chain(SamplingParams(top_n_sigma=-1, xtc_probability=0)) == chain(SamplingParams())  # off


@pytest.mark.parametrize(("version", "name"), [(1, "mirostat"), (2, "mirostat-v2")])
def test_mirostat_replaces_the_chain(version: int, name: str) -> None:
    assert chain(SamplingParams(mirostat=version, repeat_penalty=1.3)) == ["temp", name]
    assert chain(SamplingParams(mirostat=version, logit_bias={5: 1.0})) == ["logit-bias", "temp", name]
    assert chain(SamplingParams(mirostat=version, temperature=0)) == ["greedy"]


def test_dry_runs_after_the_penalties_and_before_greedy() -> None:
    from sluicegate.engines.llamacpp import samplers

    dry = SamplingParams(dry_multiplier=0.8, temperature=0)
    assert samplers.dry_on(dry) and not _greedy(dry)  # the argmax shortcut would skip it
    assert not samplers.dry_on(SamplingParams(dry_multiplier=0.8, dry_penalty_last_n=0))
    assert samplers.dry(None, SamplingParams(), 512) is None  # off: no vocabulary read
