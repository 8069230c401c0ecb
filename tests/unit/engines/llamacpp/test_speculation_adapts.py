"""Speculation that adapts (adaptive.py) and a request's prediction as its drafts
(prediction.py): the pure parts, no model."""

from __future__ import annotations

from sluicegate.engines.llamacpp.adaptive import FIRST_PAUSE, MAX_PAUSE, OFF_RATE, PROBE, Gauge, ModelRate
from sluicegate.engines.llamacpp.prediction import SYNC, Prediction
from sluicegate.engines.llamacpp.speculative import NgramIndex


def _gauge(**given: object) -> Gauge:
    values: dict[str, object] = {"most": 16, "least": 0, "match": 4, "rate": 0.5, "cheap": True}
    return Gauge(**{**values, **given})  # type: ignore[arg-type]


def test_length_follows_the_runs_it_gets() -> None:
    gauge = _gauge()
    assert gauge.allowance() == 16
    gauge.taken(16, 3)  # taken in part: a token longer than what was taken
    assert gauge.allowance() == 4
    gauge.taken(4, 4)  # taken whole: doubled
    assert gauge.allowance() == 8
    gauge.taken(8, 8)
    gauge.taken(16, 16)
    assert gauge.allowance() == 16  # never past draft_max


def test_two_drafts_refused_whole_turn_drafting_off_and_lengthen_the_match() -> None:
    gauge = _gauge()
    gauge.taken(16, 0)
    assert gauge.on and gauge.allowance() == 8 and gauge.match > 4
    gauge.taken(8, 0)
    assert not gauge.on and gauge.allowance() == 0


def test_a_low_rate_turns_drafting_off_even_with_some_taken() -> None:
    gauge = _gauge(rate=0.35)
    for _ in range(3):
        gauge.taken(10, 1)
        if not gauge.on:
            break
    assert not gauge.on and gauge.rate < OFF_RATE


def test_shadow_drafts_that_land_turn_drafting_back_on() -> None:
    gauge = _gauge(rate=0.0)  # a model whose drafts missed: its sequences start off
    assert not gauge.on
    history = [1, 2, 3]
    assert gauge.watch(history)
    gauge.propose([7, 8, 9], len(history))
    history.append(7)
    assert not gauge.watch(history)  # right so far: pending
    history += [8, 5]
    assert gauge.watch(history) and not gauge.on  # landed 2: one landed shadow is not enough
    gauge.propose([6, 6], len(history))
    history += [6, 6]
    assert gauge.watch(history)
    assert gauge.on and gauge.allowance() == 3  # the length the last shadow would have taken


def test_a_shadow_that_misses_resets_the_streak() -> None:
    gauge = _gauge(rate=0.0)
    history = [1]
    gauge.propose([2, 3], 1)
    history += [2, 3]
    gauge.watch(history)
    gauge.propose([4, 4], 3)
    history += [9]
    gauge.watch(history)
    gauge.propose([5, 5], 4)
    history += [5, 5]
    gauge.watch(history)
    assert not gauge.on  # landed, missed, landed: never two in a row


def test_a_draft_model_probes_after_a_wait_that_doubles() -> None:
    gauge = _gauge(rate=0.0, cheap=False)
    waits = []
    for _ in range(4):
        steps = 1
        while gauge.allowance() == 0:
            steps += 1
        waits.append(steps)
        gauge.taken(PROBE, 0)  # the probe missed
    assert waits == [FIRST_PAUSE, FIRST_PAUSE * 2, FIRST_PAUSE * 4, FIRST_PAUSE * 8]
    while gauge.allowance() == 0:
        pass
    gauge.taken(PROBE, 2)  # landed: drafting is on again
    assert gauge.on and gauge.allowance() == 3 and gauge.pause == FIRST_PAUSE
    assert MAX_PAUSE >= FIRST_PAUSE * 8


def test_a_probe_with_nothing_to_draft_waits_again() -> None:
    gauge = _gauge(rate=0.0, cheap=False)
    while gauge.allowance() == 0:
        pass
    gauge.no_probe()  # the draft model was not confident enough to draft anything
    steps = 1
    while gauge.allowance() == 0:
        steps += 1
    assert steps == FIRST_PAUSE


def test_draft_min_bounds_the_length() -> None:
    gauge = _gauge(least=3)
    gauge.taken(16, 1)  # a token longer than what was taken: 2, but a draft needs 3
    assert gauge.allowance() == 3


def test_model_rate_starts_new_sequences_from_what_the_model_did() -> None:
    rate = ModelRate()
    for _ in range(100):
        rate.add(16, 0)
    assert not _gauge(rate=rate.rate).on
    for _ in range(100):
        rate.add(16, 16)
    assert _gauge(rate=rate.rate).allowance() == 16


def test_ngram_draft_needs_the_least_match() -> None:
    # [5, 1, 2] ... [6, 1, 2]: the 2-gram [1, 2] matches, but the token before it differs.
    tokens = [5, 1, 2, 3, 4, 6, 1, 2]
    assert NgramIndex(2).draft(tokens, 2) == [3, 4]
    assert NgramIndex(2).draft(tokens, 2, least_match=3) == []
    tokens = [5, 1, 2, 3, 4, 5, 1, 2]
    assert NgramIndex(2).draft(tokens, 2, least_match=3) == [3, 4]
    assert NgramIndex(2).draft(tokens, 2, least_match=9) == []  # more than there is before it


def test_prediction_drafts_what_comes_next_in_it() -> None:
    prompt = [100, 101]
    predicted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    source = Prediction(predicted, len(prompt))
    assert source.draft([*prompt, 1], 4) == [2, 3, 4, 5]
    assert source.draft([*prompt, 1, 2, 3, 4], 4) == [5, 6, 7, 8]  # taken: goes on after them


def test_prediction_waits_through_an_edit_and_joins_again() -> None:
    prompt = [100]
    predicted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    source = Prediction(predicted, len(prompt))
    output = [1, 2, 3, 40, 41]  # 4, 5 replaced by 40, 41
    assert source.draft([*prompt, *output], 4) == []
    output += [6, 7]  # the last SYNC tokens are not in the prediction yet (41, 6, 7)
    assert SYNC == 3 and source.draft([*prompt, *output], 4) == []
    output += [8]  # (6, 7, 8) is
    assert source.draft([*prompt, *output], 4) == [9, 10, 11, 12]
    assert source.draft([*prompt, *output, 9, 10, 11, 12], 4) == []  # the prediction's end


def test_prediction_joins_at_the_nearest_place_after_the_edit() -> None:
    block = [1, 2, 3, 4]
    predicted = [*block, 9, *block, 8, *block, 7]
    source = Prediction(predicted, 0)
    output = [*block, 9, 50, 2, 3, 4]  # an edit in the second block
    assert source.draft(output, 2) == [8, 1]  # the second block's tail, not the first's
