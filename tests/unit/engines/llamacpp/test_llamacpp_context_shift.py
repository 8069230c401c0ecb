"""Context shift (`context_shift = true`, llama-server's `--context-shift`), the stop string
that ended a reply (`Finished.stop_word`), and a draft model that drafts in full at every step
(`draft_adaptive = false`): real llama.cpp and the tiny demo GGUF (end of turn never sampled,
so every reply runs to its limit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine_events import Reply
from sluicegate.core.request import ChatRequest, RawPrompt, SamplingParams
from sluicegate.core.slots import N_KEEP
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp import shift
from sluicegate.engines.llamacpp.engine import LlamaCppEngine

PROMPT = "Once upon a time, in a land far away,"
CONTEXT = 256  # llama.cpp rounds a stream up to 256 cells: the least there is


@pytest.fixture
def engine_defaults() -> dict[str, Any]:
    return {"batch_size": 32, "context_length": CONTEXT}


def _request(n_keep: int | None = None, **sampling: Any) -> ChatRequest:
    sampling.setdefault("temperature", 0.0)
    request = ChatRequest(
        model="s", messages=[], prompt=RawPrompt(PROMPT), sampling=SamplingParams(**sampling)
    )
    if n_keep is not None:
        request.extra[N_KEEP] = n_keep
    return request


def _reply(loaded: Any, engine: LlamaCppEngine, n_keep: int | None = None, **sampling: Any) -> Reply:
    reply: Reply = loaded.run(engine, _request(n_keep, **sampling))
    return reply


def test_the_span_is_half_of_what_follows_the_kept_tokens() -> None:
    assert shift.due(63, 64) and not shift.due(62, 64)
    assert shift.span(63, 64, 1) == (1, 31)  # BOS kept, half of the other 62 dropped
    assert shift.span(63, 64, 0) == (0, 31)
    assert shift.span(63, 64, 100) == (60, 1)  # a keep past the context: 4 cells stay free
    assert shift.span(3, 64, 2) == (2, 0)  # one token after the kept ones: nothing to drop


@pytest.mark.parametrize("batching", [True, False])
def test_without_context_shift_the_context_ends_the_output(loaded: Any, batching: bool) -> None:
    reply = _reply(loaded, loaded(batching=batching), max_tokens=600)
    assert reply.finish == "length" and reply.usage.shifted_tokens == 0
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == CONTEXT


@pytest.mark.parametrize("batching", [True, False])
def test_with_context_shift_the_output_goes_on_past_the_context(loaded: Any, batching: bool) -> None:
    engine = loaded(batching=batching, context_shift=True)
    reply = _reply(loaded, engine, max_tokens=600)
    assert reply.finish == "length"
    assert reply.usage.completion_tokens == 600  # more than twice what the context holds
    assert reply.usage.shifted_tokens > 0
    # Until the context filled, the output is the one without a shift.
    plain = _reply(loaded, loaded(batching=batching), max_tokens=600)
    assert reply.text.startswith(plain.text[: len(plain.text) * 3 // 4])
    # No limit asked: the context's end is the limit, shift or not (no request runs forever).
    unbounded = _reply(loaded, engine)
    assert unbounded.usage.prompt_tokens + unbounded.usage.completion_tokens == CONTEXT
    assert unbounded.usage.shifted_tokens == 0
    # The shifted cells are not reused by the next request: the same request, the same reply.
    assert _reply(loaded, engine, max_tokens=600).text == reply.text


@pytest.mark.parametrize("batching", [True, False])
def test_n_keep_is_what_a_shift_keeps(loaded: Any, batching: bool) -> None:
    """One shift (300 tokens): it drops half of what follows the kept tokens. The demo model
    adds no BOS, so llama-server's default keeps nothing; `n_keep` more, -1 the whole prompt."""
    engine = loaded(batching=batching, context_shift=True)
    for n_keep, keep in ((None, 0), (10, 10), (-1, None)):
        reply = _reply(loaded, engine, n_keep, max_tokens=300)
        keep = reply.usage.prompt_tokens if keep is None else keep
        assert reply.usage.completion_tokens == 300
        assert reply.usage.shifted_tokens == (CONTEXT - 1 - keep) // 2, n_keep
    assert shift.kept(-1, 24) == 24 and shift.kept(3, 24) == 3


def test_context_shift_with_a_draft_model(loaded: Any) -> None:
    engine = loaded(context_shift=True, draft_model=str(loaded.models[0]), draft_p_min=0.0)
    reply = _reply(loaded, engine, max_tokens=400)
    assert reply.usage.completion_tokens == 400 and reply.usage.shifted_tokens > 0
    assert reply.usage.accepted_prediction_tokens > 0  # it went on drafting after the shifts
    plain = _reply(loaded, loaded(context_shift=True), max_tokens=400)
    assert reply.text == plain.text  # drafts never change the output


@pytest.mark.parametrize("batching", [True, False])
def test_the_stop_string_that_ended_the_output_is_named(loaded: Any, batching: bool) -> None:
    engine = loaded(batching=batching)
    whole = _reply(loaded, engine, max_tokens=30)
    word = whole.text[20:24]
    reply = _reply(loaded, engine, max_tokens=30, stop=["zzzzqqq", word])
    assert reply.finish == "stop" and reply.stop_word == word
    assert whole.text.startswith(reply.text) and word not in reply.text
    assert whole.stop_word is None  # the limit ended it


def test_a_draft_model_drafts_in_full_at_every_step_when_not_adaptive(loaded: Any) -> None:
    # A draft model of other weights guesses wrong: the adaptive gauge soon stops drafting,
    # `draft_adaptive = false` drafts `draft_max` tokens at every step, as llama-server does.
    other = str(loaded.models[1])
    fixed = _reply(
        loaded,
        loaded(draft_model=other, draft_p_min=0.0, draft_max=4, draft_adaptive=False),
        max_tokens=40,
    )
    drafted = fixed.usage.accepted_prediction_tokens + fixed.usage.rejected_prediction_tokens
    tokens = 40 - fixed.usage.accepted_prediction_tokens  # steps: each writes one token and what it took
    assert drafted >= 4 * (tokens - 4)
    adaptive = _reply(loaded, loaded(draft_model=other, draft_p_min=0.0, draft_max=4), max_tokens=40)
    assert adaptive.usage.accepted_prediction_tokens + adaptive.usage.rejected_prediction_tokens < drafted
    assert adaptive.text == fixed.text


def test_draft_adaptive_is_a_draft_models_key(models: tuple[Path, Path]) -> None:
    table = {"id": "s", "engine": "llamacpp", "path": str(models[0])}
    with pytest.raises(ConfigError, match="draft_adaptive"):
        LlamaCppEngine.from_config({**table, "speculative": "ngram", "draft_adaptive": False}, Path("."))
    with pytest.raises(ConfigError, match="draft_adaptive"):
        LlamaCppEngine.from_config({**table, "draft_model": str(models[1]), "draft_adaptive": 1}, Path("."))
    with pytest.raises(ConfigError, match="context_shift"):
        LlamaCppEngine.from_config({**table, "context_shift": "yes"}, Path("."))
