"""Speculation that adapts (adaptive.py) and a request's prediction as its drafts
(prediction.py): the pure parts, no model."""

from __future__ import annotations

import random

import pytest

from sluicegate.engines.llamacpp.adaptive import FIRST_PAUSE, MAX_PAUSE, OFF_RATE, PROBE, Gauge, ModelRate
from sluicegate.engines.llamacpp.prediction import FAR_SYNC, SYNC, Prediction
from sluicegate.engines.llamacpp.speculative import (
    NgramDrafter,
    NgramIndex,
    SpeculativeSettings,
    Speculator,
    tiled,
)


def _gauge(**given: object) -> Gauge:
    values: dict[str, object] = {"most": 16, "least": 0, "match": 4, "rate": 0.5, "cheap": True}
    return Gauge(**{**values, **given})  # type: ignore[arg-type]


def test_length_follows_the_runs_it_gets() -> None:
    gauge = _gauge()
    assert gauge.allowance() == 16
    gauge.taken(16, 3)  # taken in part: halved (a cheap source), not cut to the run it got
    assert gauge.allowance() == 8
    gauge.taken(8, 2)
    assert gauge.allowance() == 4
    gauge.taken(4, 4)  # taken whole: doubled
    assert gauge.allowance() == 8
    gauge.taken(8, 8)
    gauge.taken(16, 16)
    assert gauge.allowance() == 16  # never past draft_max


def test_a_run_taken_in_part_keeps_the_next_draft_longer_than_it() -> None:
    gauge = _gauge()
    gauge.taken(16, 13)  # half of 16 would be shorter than the run it got
    assert gauge.allowance() == 14


def test_a_long_run_after_a_short_one_is_drafted_long() -> None:
    """Issue 48: after a run that ended early (a new name), the next run is drafted near
    `draft_max` again within two drafts, not grown back a token at a time."""
    gauge = _gauge()
    gauge.taken(16, 2)
    first = gauge.allowance()
    gauge.taken(first, first)
    assert first == 8 and gauge.allowance() == 16


def test_a_draft_models_run_taken_in_part_sets_the_next_length() -> None:
    gauge = _gauge(cheap=False)  # each draft token costs a decode of the draft model
    gauge.taken(16, 3)
    assert gauge.allowance() == 4


def test_a_draft_taken_whole_sets_the_match_back() -> None:
    gauge = _gauge()
    gauge.taken(16, 0)
    gauge.taken(8, 1)
    assert gauge.match > 4
    gauge.taken(4, 4)
    assert gauge.match == 4  # copying again: every run's start is drafted


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
    gauge = _gauge(least=3, cheap=False)
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


def test_tiled_cuts_a_draft_to_whole_tiles_of_verification_rows() -> None:
    assert [tiled(n) for n in range(18)] == [0, 1, 2, 3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15]


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
    assert source.draft(output, 1) == [8]  # the second block's tail, not the first's


def _replay(prompt: list[int], output: list[int], settings: SpeculativeSettings) -> tuple[int, int, int]:
    """(drafted, taken, decode steps) of `Speculator` over a known output, one sequence, as the
    scheduler drives it: each step decodes the next token and its draft, and takes the draft's
    tokens while they are the output's (what greedy verification does)."""
    speculator = Speculator(settings, NgramDrafter(settings, 1), "replay", 1)
    speculator.start(0, None, len(prompt))
    history, done, steps = [*prompt, output[0]], 1, 0
    while done < len(output):
        most = min(speculator.most(0), len(output) - done - 1)
        draft = speculator.draft([(0, history, most)])[0]
        taken = 0
        while taken < len(draft) and draft[taken] == output[done + taken]:
            taken += 1
        if draft:
            speculator.record(0, len(draft), taken)
        steps += 1
        history += output[done : done + taken + 1]
        done += taken + 1
    return speculator.drafted, speculator.accepted, steps


def _always_most(prompt: list[int], output: list[int], n: int, most: int) -> tuple[int, int]:
    """(drafted, taken) drafting `most` tokens at every n-gram match (llama-server's
    `ngram-simple`): no gauge."""
    index, history, done, drafted, taken_all = NgramIndex(n), [*prompt, output[0]], 1, 0, 0
    while done < len(output):
        draft = index.draft(history, min(most, len(output) - done - 1))
        taken = 0
        while taken < len(draft) and draft[taken] == output[done + taken]:
            taken += 1
        drafted, taken_all = drafted + len(draft), taken_all + taken
        history += output[done : done + taken + 1]
        done += taken + 1
    return drafted, taken_all


def test_drafts_grow_back_on_a_copy_workload_with_breaks() -> None:
    """Issue 48: output copying runs of 48 tokens from its prompt, each run ended by a token of
    its own (a new name). A run ending in a draft must not leave the next run drafted short:
    nearly every token always drafting `draft_max` takes is taken, at fewer draft rows. (Cutting
    the next draft to the last run's length took ~92% of them.)"""
    rng = random.Random(5)
    library = [rng.randrange(10_000, 60_000) for _ in range(400)]
    output: list[int] = []
    for new in range(30):
        at = rng.randrange(0, 340)
        output += [*library[at : at + 48], 70_000 + new]
    settings = SpeculativeSettings(kind="ngram")
    drafted, taken, steps = _replay(library, output, settings)
    most_drafted, most_taken = _always_most(library, output, settings.ngram_size, settings.draft_max)
    assert taken >= 0.95 * most_taken and drafted < most_drafted
    assert steps == len(output) - 1 - taken


def test_drafting_backs_off_on_a_workload_with_no_repeats() -> None:
    """Output drawn at random from 40 tokens: one-token n-grams match at every step, their
    drafts all miss. Drafting stops after its first drafts and stays off (shadows never land)."""
    rng = random.Random(3)
    tokens = [rng.randrange(50_000, 50_040) for _ in range(1500)]
    for n in (1, 2):
        drafted, taken, _ = _replay(
            tokens[:100], tokens[100:], SpeculativeSettings(kind="ngram", ngram_size=n)
        )
        assert taken <= drafted <= 32  # 1,400 tokens: always drafting puts thousands of rows
        assert _always_most(tokens[:100], tokens[100:], n, 16)[0] > 1_000


def test_a_failed_join_does_not_move_where_the_next_join_is_searched() -> None:
    """A join at a common 3-gram far off that fails at once must not become the place later
    joins search from: the output inserted text and goes on with the prediction where it left
    it, so the join is the nearest place after that, not after the failed one."""
    predicted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 40, 41, 42, 43, 5, 6, 7, 88, 0]
    source = Prediction(predicted, 0)
    output = [1, 2, 3, 50, 40, 41, 42]  # left after 3; joins where (40, 41, 42) is
    assert source.draft(output, 2) == [43, 5]
    output += [77, 5, 6, 7]  # that join fails at once; the output goes on with the file at 5
    assert source.draft(output, 2) == [8, 9]  # not [88, 0], after the failed join


def test_a_prediction_the_output_left_hands_over_to_the_ngram_lookup() -> None:
    """Issue 48: Gemma 3 270M asked to edit a 300-line file copied 135 tokens of it, then wrote
    code of its own and looped on it. The prediction has nothing to draft there; the loop is the
    sequence's own text, which the n-gram lookup drafts (the model's n-gram index with
    `speculative = "ngram"`, else one of the prediction's sequence's own)."""
    prompt, loop = [100, 101], [50, 51, 52, 53]
    history = [*prompt, 1, 2, 3, *loop, *loop, *loop]
    settings = SpeculativeSettings(kind="ngram", ngram_size=2)
    for drafter in (None, NgramDrafter(settings, 1)):
        speculator = Speculator(settings, drafter, "m", 1)
        speculator.start(0, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], len(prompt))
        assert speculator.draft([(0, history, 4)]) == [loop]
        assert speculator.draft([(0, [*history, *loop[:2]], 4)]) == [[*loop[2:], *loop[:2]]]
    speculator = Speculator(settings, None, "m", 1)
    speculator.start(0, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], len(prompt))
    assert speculator.draft([(0, [*prompt, 1, 2], 4)]) == [[3, 4, 5, 6]]  # the prediction first


def _replay_prediction(
    prompt: list[int], predicted: list[int], output: list[int], settings: SpeculativeSettings | None = None
) -> tuple[int, int, int]:
    """(drafted, taken, decode steps) of a request's prediction over a known output, no n-gram
    drafter on the model (`speculative` unset), driven as the scheduler drives it."""
    settings = settings or SpeculativeSettings(kind="ngram")
    speculator = Speculator(None, None, "replay", 1)
    speculator.start(0, predicted, len(prompt))
    history, done, steps = [*prompt, output[0]], 1, 0
    while done < len(output):
        most = min(speculator.most(0), len(output) - done - 1)
        draft = speculator.draft([(0, history, most)])[0] if speculator.drafting(0) else []
        taken = 0
        while taken < len(draft) and draft[taken] == output[done + taken]:
            taken += 1
        if draft:
            speculator.record(0, len(draft), taken)
        steps += 1
        history += output[done : done + taken + 1]
        done += taken + 1
    return speculator.drafted, speculator.accepted, steps


def _renamed_file(seed: int) -> tuple[list[int], list[int]]:
    """(a 'file' of 1,200 tokens whose name `runtime` occurs every ~30 tokens in two spellings
    (tokens 7 and 8, 9: `.runtime`, ` runtime`), the file with it renamed: 70 and 80)."""
    rng = random.Random(seed)
    predicted: list[int] = []
    while len(predicted) < 1_200:
        predicted += [rng.randrange(1_000, 30_000) for _ in range(rng.randrange(20, 40))]
        predicted += [7] if rng.random() < 0.5 else [8, 9]
    renamed: list[int] = []
    for token in predicted:
        renamed += [70] if token == 7 else [80] if token == 8 else [] if token == 9 else [token]
    return predicted, renamed


def test_a_rename_in_the_output_is_drafted_right_at_its_later_occurrences() -> None:
    """Issue 48: the output renames a name the prediction has ~40 times (two spellings, one of
    them two tokens in the prediction and one in the output). After each spelling's first
    occurrence the substitution is learned, and the later ones are drafted as the output
    writes them: nearly every draft lands. (Without learning, every occurrence refuses the rest
    of its draft and leaves the prediction: ~40 misses, ~a third of the steps more.)"""
    predicted, output = _renamed_file(11)
    source = Prediction(predicted, 1)
    prompt = [100]
    drafted, taken, steps = _replay_prediction(prompt, predicted, output)
    assert drafted - taken <= 2 * 16  # a refused tail at each spelling's first occurrence
    assert taken >= len(output) - 1 - 2 * (SYNC + 2) - len(output) // 16 - 8
    assert steps <= len(output) // 16 + 2 * (SYNC + 3) + 8
    # The Prediction itself: both spellings learned, the rest of it rewritten.
    source.draft([*prompt, *output], 1)
    assert source.learned == 2 and source.tokens.count(7) == source.tokens.count(8) == 1  # the first ones


def test_a_substitution_the_output_undoes_is_dropped() -> None:
    """A rename learned at one place, then the original written where the replacement was
    drafted: the substitution is dropped, and the original is drafted after it."""
    predicted = [1, 2, 3, 7, 4, 5, 6, 10, 11, 12, 7, 13, 14, 15, 16, 17, 18, 7, 19, 20]
    source = Prediction(predicted, 0)
    output = [1, 2, 3, 70, 4, 5, 6]  # 7 -> 70 learned at the join (4, 5, 6)
    assert source.draft(output, 5) == [10, 11, 12, 70, 13]
    output += [10, 11, 12, 7, 13, 14, 15]  # the original written there: dropped
    assert source.draft(output, 3) == [16, 17, 18]
    assert source.draft([*output, 16, 17, 18], 1) == [7]


def test_only_short_edits_are_learned() -> None:
    """A long stretch written in place of a token (an edit of that place, not a rename) and a
    pure insertion teach nothing."""
    predicted = [1, 2, 3, 7, 4, 5, 6, 10, 11, 12, 7, 13]
    source = Prediction(predicted, 0)
    output = [1, 2, 3, *range(200, 220), 4, 5, 6]  # 7 -> twenty tokens
    assert source.draft(output, 4) == [10, 11, 12, 7] and source.learned == 0
    source = Prediction(predicted, 0)
    output = [1, 2, 3, 7, 90, 91, 4, 5, 6]  # inserted: nothing skipped
    assert source.draft(output, 4) == [10, 11, 12, 7] and source.learned == 0


def test_a_prediction_the_output_never_follows_drafts_little_after_its_first_misses() -> None:
    """The output does not follow the prediction: it writes 5-token fragments of it at random
    places between text of its own. Each fragment joins the prediction (5 tokens: a far join)
    and each join's draft is refused whole. Drafting backs off after the first misses (shadows
    never land): 100 such joins, a few dozen draft tokens."""
    rng = random.Random(4)
    predicted = [rng.randrange(1_000, 60_000) for _ in range(2_000)]
    output: list[int] = []
    while len(output) < 1_500:
        at = rng.randrange(0, 1_990)
        output += predicted[at : at + 5] + [rng.randrange(60_000, 90_000) for _ in range(10)]
    drafted, taken, _ = _replay_prediction([1, 2], predicted, output)
    assert taken == 0 and drafted <= 32  # 24; without the back-off 126


def test_a_far_join_needs_a_longer_match_than_a_near_one() -> None:
    """After a miss the prediction is joined again on 3 tokens only within a short edit of
    where the output left it (a rename, an insertion); further off a 3-gram is as often a false
    join, whose draft is refused whole, so there it takes FAR_SYNC tokens (issue 48: Gemma's
    reply that loops over the file's methods, 167 -> 109 decode steps replayed)."""
    predicted = [*range(1, 21), 30, 31, 32, 40, 41, 42]
    source = Prediction(predicted, 0)
    assert FAR_SYNC == 5
    assert source.draft([1, 2, 3, 99, 30, 31, 32], 2) == []  # (30, 31, 32) ends 20 tokens on
    source = Prediction(predicted, 0)
    assert source.draft([1, 2, 3, 99, 19, 20, 30, 31, 32], 2) == [40, 41]  # 5 tokens match there
    source = Prediction(predicted, 0)
    assert source.draft([1, 2, 3, 99, 5, 6, 7], 2) == [8, 9]  # near: 3 tokens do


def test_learning_stops_at_the_rewrite_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each substitution learned rewrites the rest of the prediction on the worker thread: a
    request rewrites at most MOST_REWRITTEN tokens, so a long prediction learns fewer."""
    from sluicegate.engines.llamacpp import prediction

    predicted = [1, 2, 3, 7, 4, 5, 6, 8, 9, 10, 11, 12, 13, 7, 14, 15, 16, 9, 17, 18, 19, 20]
    output = [1, 2, 3, 70, 4, 5, 6, 8, 90, 10, 11, 12]  # 7 -> 70, then 9 -> 90
    source = Prediction(predicted, 0)
    source.draft(output, 1)
    assert source.learned == 2
    monkeypatch.setattr(prediction, "MOST_REWRITTEN", len(predicted))  # room for one rewrite
    source = Prediction(predicted, 0)
    source.draft(output, 1)
    assert source.learned == 1
