"""Greedy decoding without llama.cpp's sampler pass (`LlamaRuntime.argmax`): the same token as
the greedy sampler at every step, on Gemma 3's 262,144-token vocabulary, and used only where
the request's chain is that sampler alone."""

from __future__ import annotations

import random

import llama_cpp
import pytest

from sluicegate.core.request import SamplingParams
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime, _greedy
from sluicegate.parsing import PlainText


def test_argmax_picks_the_greedy_samplers_token_at_every_step(gemma_runtime: LlamaRuntime) -> None:
    runtime = gemma_runtime
    rng = random.Random(7)
    prompt = [rng.randrange(1000, 200_000) for _ in range(24)]
    job = Job(prompt, SamplingParams(temperature=0), 0, PlainText(), lambda _events: None, ("test", None))
    assert runtime.prefill(job)
    chain = runtime._sampler(SamplingParams(temperature=0), 0)
    try:
        picked = []
        for _ in range(24):
            token = runtime.argmax()
            assert token == llama_cpp.llama_sampler_sample(chain, runtime.context.ctx, -1)
            picked.append(token)
            runtime._decode([token])
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert len(set(picked)) > 1  # a walk through the model, not one token over and over


@pytest.mark.parametrize(
    ("sampling", "greedy"),
    [
        (SamplingParams(temperature=0), True),
        (SamplingParams(temperature=0, repeat_penalty=1.0, presence_penalty=0.0), True),
        (SamplingParams(temperature=0, repeat_penalty=1.1), False),  # the penalties sampler first
        (SamplingParams(temperature=0, frequency_penalty=0.5), False),
        (SamplingParams(temperature=0, presence_penalty=0.5), False),
        (SamplingParams(temperature=0.7), False),
        (SamplingParams(), False),  # the default temperature samples
    ],
)
def test_only_a_chain_of_the_greedy_sampler_alone_is_replaced(sampling: SamplingParams, greedy: bool) -> None:
    assert _greedy(sampling) is greedy
