"""Speculative decoding in the batching scheduler: n-gram drafts and a draft model.

Real llama.cpp and the tiny demo GGUF (random weights, end of turn never sampled). Its greedy
output soon repeats a short cycle, so n-gram drafts find matches in the text so far; a draft
model written with the target's seed is the target itself (every draft token taken), one with
another seed has the same vocabulary and guesses wrong.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from engine_events import Reply, engine_events, run_reply
from sluicegate.core.events import TextDelta
from sluicegate.core.request import ChatRequest, Message, SamplingParams
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.speculative import ModelDrafter, NgramIndex

SOURCE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
PROMPTS = [
    SOURCE * 3 + "# one",
    "What is the weather in Paris today?",
    SOURCE * 2 + "def mul(a, b):",
    "Tell me a story about a dragon and a knight.",
    SOURCE + "# five",
    "List three colours.",
]


def _request(prompt: str, **sampling: Any) -> ChatRequest:
    sampling.setdefault("max_tokens", 40)
    sampling.setdefault("temperature", 0.0)
    return ChatRequest(model="s", messages=[Message("user", prompt)], sampling=SamplingParams(**sampling))


def _counts(engine: LlamaCppEngine) -> tuple[int, int]:
    assert engine._scheduler is not None and engine._scheduler.speculator is not None
    speculator = engine._scheduler.speculator
    return speculator.drafted, speculator.accepted


def _replies(loaded: Any, engine: LlamaCppEngine, *, together: bool = True, **sampling: Any) -> list[str]:
    """The prompts' replies, run at once (`together`: batched as they arrive) or one by one."""

    async def run() -> list[Reply]:
        runs = [
            run_reply(engine, _request(p, max_tokens=20 + 17 * (i % 4), seed=i, **sampling))
            for i, p in enumerate(PROMPTS)
        ]
        if together:
            return list(await asyncio.gather(*runs))
        return [await reply for reply in runs]

    replies = loaded.loop.run_until_complete(run())
    assert all(
        r.finish == "length" and r.usage.completion_tokens == 20 + 17 * (i % 4) for i, r in enumerate(replies)
    )
    return [r.text for r in replies]


def test_ngram_index_drafts_what_followed_the_last_match() -> None:
    index = NgramIndex(2)
    tokens = [1, 2, 3, 4, 9, 1, 2, 5, 6, 1, 2]
    assert index.draft(tokens, 3) == [5, 6, 1]  # the latest earlier [1, 2] was followed by 5, 6
    tokens += [5, 6, 7]
    assert index.draft(tokens, 8) == []  # [6, 7] never came before
    assert index.draft([8, 8, 8], 4) == [8]  # another list: indexed afresh
    assert NgramIndex(3).draft([1, 2, 3], 4) == []
    # An image's positions (negative ids) end a draft: they are no tokens to decode.
    assert NgramIndex(1).draft([4, 5, -7, -7, 6, 4], 5) == [5]


def test_ngram_greedy_output_identical_under_batching(loaded: Any) -> None:
    plain = loaded(parallel=3)
    ngram = loaded(parallel=3, speculative="ngram", ngram_size=3)
    expected = _replies(loaded, plain)
    assert len(set(expected)) > 1
    assert _replies(loaded, ngram) == expected
    drafted, accepted = _counts(ngram)
    assert accepted > 0 and drafted >= accepted
    # Fewer decodes than tokens: drafts were taken several to a step.
    assert ngram._scheduler is not None and plain._scheduler is not None
    assert ngram._scheduler.steps < plain._scheduler.steps


def test_ngram_sampled_output_identical(loaded: Any) -> None:
    """With a seed, the same draws: each token is still the target's draw from its own row.
    One reply at a time: which sequences share a batch depends on when each arrives against the
    worker's steps, and a row's logits may differ in their last bits with its batch, which a
    sampled draw near a boundary shows (it failed about once in three runs on a loaded machine)."""
    plain = loaded(parallel=3)
    ngram = loaded(parallel=3, speculative="ngram", ngram_size=2)
    expected = _replies(loaded, plain, together=False, temperature=1.0, top_k=3)
    assert _replies(loaded, ngram, together=False, temperature=1.0, top_k=3) == expected
    assert _counts(ngram)[1] > 0


@pytest.mark.parametrize("draft", ["target", "other"])
def test_draft_model_greedy_output_identical_under_batching(loaded: Any, draft: str) -> None:
    target, other = loaded.models
    plain = loaded(parallel=3)
    drafted = loaded(parallel=3, draft_model=str(target if draft == "target" else other), draft_p_min=0.0)
    assert _replies(loaded, drafted) == _replies(loaded, plain)
    made, accepted = _counts(drafted)
    assert made > 0
    if draft == "target":  # its own guesses: every one taken, several tokens a step
        assert accepted == made
    else:
        assert accepted < made


def test_draft_longer_than_max_tokens_stops_at_the_limit(loaded: Any) -> None:
    target, _ = loaded.models
    plain = loaded(parallel=2)
    drafted = loaded(parallel=2, draft_model=str(target), draft_p_min=0.0, draft_max=16)
    ngram = loaded(parallel=2, speculative="ngram", ngram_size=2, draft_max=16)
    for engine in (plain, drafted, ngram):
        engine.expected = [  # type: ignore[attr-defined]
            loaded.loop.run_until_complete(run_reply(engine, _request(PROMPTS[0], max_tokens=n)))
            for n in (3, 7, 30)
        ]
    for engine in (drafted, ngram):
        for reply, alone, n in zip(engine.expected, plain.expected, (3, 7, 30), strict=True):  # type: ignore[attr-defined]
            assert (reply.text, reply.finish, reply.usage.completion_tokens) == (alone.text, "length", n)
    assert _counts(drafted)[1] > 0 and _counts(ngram)[1] > 0


def test_draft_longer_than_the_context_stops_at_its_end(loaded: Any) -> None:
    """No max_tokens: the reply runs to the context's end, drafts cut to fit (a draft past the
    last cell would fail the whole batch's decode)."""
    target, _ = loaded.models
    plain = loaded(parallel=2, context_length=256)
    drafted = loaded(parallel=2, context_length=256, draft_model=str(target), draft_p_min=0.0, draft_max=48)
    ngram = loaded(parallel=2, context_length=256, speculative="ngram", ngram_size=2, draft_max=48)
    replies = [
        loaded.loop.run_until_complete(run_reply(e, _request(PROMPTS[2], max_tokens=None)))
        for e in (plain, drafted, ngram)
    ]
    assert replies[0].usage.prompt_tokens + replies[0].usage.completion_tokens == 256
    for reply in replies[1:]:
        assert (reply.text, reply.finish, reply.usage.completion_tokens) == (
            replies[0].text,
            "length",
            replies[0].usage.completion_tokens,
        )


def test_stop_string_inside_an_accepted_draft_ends_there(loaded: Any) -> None:
    plain = loaded(parallel=2)
    ngram = loaded(parallel=2, speculative="ngram", ngram_size=2, draft_max=32)
    full = loaded.loop.run_until_complete(run_reply(plain, _request(PROMPTS[0], max_tokens=60))).text
    # A stop string first met deep in the repetitive part, where drafts run long: 20 characters
    # of the output's cyclic tail, which first occur several cycles after the cycle started.
    stop = full[-25:-5]
    stopped = [
        loaded.loop.run_until_complete(run_reply(e, _request(PROMPTS[0], max_tokens=60, stop=[stop])))
        for e in (plain, ngram)
    ]
    assert stopped[0].finish == "stop" and stopped[0].text == full[: full.index(stop)]
    assert (stopped[1].text, stopped[1].finish) == (stopped[0].text, "stop")
    assert _counts(ngram)[1] > 0


def test_grammar_constrained_output_identical(loaded: Any) -> None:
    """Under a grammar the drafts go on: the grammar only sees the tokens the target draws."""
    plain = loaded(parallel=2)
    ngram = loaded(parallel=2, speculative="ngram", ngram_size=2)
    request = _request(PROMPTS[0], max_tokens=40)
    request.response_format = {"type": "json_object"}
    replies = [loaded.loop.run_until_complete(run_reply(e, request)) for e in (plain, ngram)]
    assert replies[1].text == replies[0].text and replies[0].text.startswith("{")
    assert _counts(ngram)[0] > 0


def test_cancel_mid_draft_frees_the_sequence(loaded: Any) -> None:
    target, _ = loaded.models
    engine = loaded(parallel=3, draft_model=str(target), draft_p_min=0.0)
    scheduler = engine._scheduler
    assert scheduler is not None and scheduler.speculator is not None
    drafter = scheduler.speculator.drafter
    assert isinstance(drafter, ModelDrafter)

    async def scenario() -> list[Reply]:
        long = _request(PROMPTS[0], max_tokens=400)
        engine.check(long)
        stream = engine_events(engine, long)
        texts = 0
        async for event in stream:
            texts += isinstance(event, TextDelta)
            if texts >= 5:
                break
        others = asyncio.gather(*(run_reply(engine, _request(p, max_tokens=30)) for p in PROMPTS[1:3]))
        # Every slot busy before the cancel, so no other request takes the cancelled one's.
        while not all(slot.sequence is not None for slot in scheduler.slots):
            await asyncio.sleep(0.001)
        await stream.aclose()  # the client went away while its drafts were being verified
        return list(await others)

    replies = loaded.loop.run_until_complete(scenario())
    assert all(r.usage.completion_tokens == 30 for r in replies)
    assert scheduler.speculator.accepted > 0
    dropped = [s for s in scheduler.slots if not s.cached]
    assert len(dropped) == 1
    slot = dropped[0].id
    assert engine._runtime is not None
    assert llama_cpp.llama_memory_seq_pos_max(engine._runtime.context.memory, slot) == -1
    # The draft model's stream for that slot is freed too.
    assert llama_cpp.llama_memory_seq_pos_max(drafter.runtime.context.memory, slot) == -1
    assert all(slot.sequence is None for slot in scheduler.slots)


def test_settings_are_checked(models: tuple[Path, Path]) -> None:
    target, _ = models

    def build(**extra: Any) -> LlamaCppEngine:
        table = {"id": "s", "engine": "llamacpp", "path": str(target)}
        return LlamaCppEngine.from_config({**table, **extra}, Path("."))

    spec = build(speculative="ngram", draft_max=8).settings.speculative
    assert spec is not None and (spec.kind, spec.draft_max, spec.ngram_size) == ("ngram", 8, 12)
    spec = build(draft_model=str(target)).settings.speculative
    assert spec is not None and spec.kind == "draft" and spec.draft_model == target
    assert build().settings.speculative is None
    for bad, words in (
        ({"speculative": "magic"}, "must be"),
        ({"speculative": "draft"}, "needs `draft_model`"),
        ({"draft_max": 4}, "need `speculative`"),
        ({"speculative": "ngram", "draft_p_min": 0.5}, "draft model"),
        ({"speculative": "ngram", "batching": False}, "batching"),
        ({"speculative": "ngram", "draft_min": 9, "draft_max": 4}, "above"),
        ({"draft_model": "/nowhere.gguf"}, "no draft model"),
    ):
        with pytest.raises(ConfigError, match=words):
            build(**bad)


def test_draft_model_with_another_vocabulary_is_refused(loaded: Any, tmp_path: Path) -> None:
    other = make_demo_gguf(tmp_path / "wide.gguf", extra_vocab=64)
    with pytest.raises(Exception, match="vocabulary"):
        loaded(draft_model=str(other))


# --- speculation that adapts (adaptive.py), and a request's prediction (prediction.py) ------


def _alone(loaded: Any, engine: LlamaCppEngine, request: ChatRequest) -> Reply:
    return loaded.loop.run_until_complete(run_reply(engine, request))


def test_drafts_that_miss_back_off(loaded: Any) -> None:
    """A draft model that always guesses wrong: after its first drafts, only short probes at
    waits that double (without the gauge: 16 draft tokens at every one of 200 steps)."""
    _, other = loaded.models
    engine = loaded(parallel=2, draft_model=str(other), draft_p_min=0.0)
    reply = _alone(loaded, engine, _request(PROMPTS[1], max_tokens=200))
    drafted, accepted = _counts(engine)
    assert accepted == 0 and 0 < drafted <= 16 + 8 + 2 * 5
    # The request's own counts, as OpenAI's usage reports them.
    assert (reply.usage.accepted_prediction_tokens, reply.usage.rejected_prediction_tokens) == (0, drafted)


def test_ngram_drafts_on_output_with_no_repeats_back_off(loaded: Any) -> None:
    """Sampled hot, the output repeats nothing the prompt had: one-token matches abound, their
    drafts miss, and drafting stops (the match a draft needs grows, then shadows decide)."""
    engine = loaded(parallel=2, speculative="ngram", ngram_size=1)
    reply = _alone(loaded, engine, _request(PROMPTS[0], max_tokens=200, temperature=1.5, top_k=0, seed=3))
    drafted, accepted = _counts(engine)
    assert accepted <= drafted <= 40
    assert reply.usage.rejected_prediction_tokens == drafted - accepted


def test_drafting_comes_back_when_drafts_land_again(loaded: Any) -> None:
    """A sequence that starts off (its model's drafts had missed) drafts again once its shadow
    drafts land: the demo model's greedy output soon repeats itself."""
    plain = loaded(parallel=2)
    engine = loaded(parallel=2, speculative="ngram", ngram_size=2)
    assert engine._scheduler is not None and engine._scheduler.speculator is not None
    engine._scheduler.speculator.model_rate.rate = 0.0
    request = _request(PROMPTS[1], max_tokens=120)
    reply = _alone(loaded, engine, request)
    assert reply.text == _alone(loaded, plain, request).text
    assert reply.usage.accepted_prediction_tokens > 60


def _predicting(prompt: str, prediction: str, **sampling: Any) -> ChatRequest:
    request = _request(prompt, **sampling)
    request.prediction = prediction
    return request


def test_prediction_drafts_without_speculative_config(loaded: Any) -> None:
    """The answer predicted right: drafted from the prediction and taken, several tokens a
    step, with no `speculative` setting; the output is what it is without a prediction."""
    plain = loaded(parallel=2)
    expected = _alone(loaded, plain, _request(PROMPTS[3], max_tokens=80))
    engine = loaded(parallel=2)
    before = engine._scheduler.steps if engine._scheduler else 0
    reply = _alone(loaded, engine, _predicting(PROMPTS[3], expected.text, max_tokens=80))
    assert reply.text == expected.text
    assert reply.usage.accepted_prediction_tokens >= 60
    assert engine._scheduler is not None and engine._scheduler.steps - before < 40
    # Another request without a prediction drafts nothing: the model has no drafter.
    drafted = _counts(engine)[0]
    again = _alone(loaded, engine, _request(PROMPTS[3], max_tokens=80))
    assert again.text == expected.text and _counts(engine)[0] == drafted
    assert again.usage.accepted_prediction_tokens == again.usage.rejected_prediction_tokens == 0
    # Every sequence gone: no slot drafts, and a step skips drafting at once.
    assert engine._scheduler.speculator is not None and engine._scheduler.speculator.active == 0


def test_prediction_drafts_fill_whole_tiles_of_rows(loaded: Any) -> None:
    """A prediction's drafts are cut so that a verification's rows (the next token and the
    draft) fill whole tiles of 4: llama.cpp decodes 17 rows in 22% more time than 16
    (bench/README.md, speculation round nine). Predicted right, a draft of 16 would come."""
    plain = loaded(parallel=2)
    expected = _alone(loaded, plain, _request(PROMPTS[3], max_tokens=80))
    engine = loaded(parallel=2)
    speculator = engine._scheduler.speculator if engine._scheduler else None
    assert speculator is not None
    lengths: list[int] = []
    record = speculator.record

    def recording(slot: int, drafted: int, accepted: int) -> None:
        lengths.append(drafted)
        record(slot, drafted, accepted)

    speculator.record = recording  # type: ignore[method-assign]
    reply = _alone(loaded, engine, _predicting(PROMPTS[3], expected.text, max_tokens=80))
    assert reply.text == expected.text
    assert 15 in lengths and all(n < 3 or (n + 1) % 4 == 0 for n in lengths), lengths


def test_prediction_with_an_edit_leaves_the_output_unchanged(loaded: Any) -> None:
    plain = loaded(parallel=2)
    engine = loaded(parallel=2, speculative="ngram")
    for sampling in ({}, {"temperature": 1.0, "top_k": 3, "seed": 5}):
        expected = _alone(loaded, plain, _request(PROMPTS[5], max_tokens=90, **sampling)).text
        cut = len(expected) // 2
        edited = expected[:cut] + " something else entirely " + expected[cut + 10 :]
        reply = _alone(loaded, engine, _predicting(PROMPTS[5], edited, max_tokens=90, **sampling))
        assert reply.text == expected
        if not sampling:
            assert reply.usage.accepted_prediction_tokens > 0 and reply.usage.rejected_prediction_tokens > 0


def test_prediction_without_batching_is_ignored(loaded: Any) -> None:
    plain = loaded(parallel=1, batching=False)
    expected = _alone(loaded, plain, _request(PROMPTS[3], max_tokens=30)).text
    reply = _alone(loaded, plain, _predicting(PROMPTS[3], expected, max_tokens=30))
    assert reply.text == expected and reply.usage.accepted_prediction_tokens == 0
