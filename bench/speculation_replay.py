"""Drafting policies replayed over a known output: draft counts and decode steps, no model.

At temperature 0 a sequence's output does not depend on its drafts (a draft token is taken iff
it is the token the target draws), so a policy's counts over an output are a function of the
prompt's and the output's tokens alone. `speculative.py --replay` fetches each server's greedy
output as token ids and replays on it, on the same text:

- `ours`: Sluicegate's `Speculator` (engines/llamacpp/speculative.py, with the `Gauge` of
  adaptive.py), driven as the scheduler drives it;
- `predicted`: the same with a request's `prediction` (prediction.py) as the draft source, as
  a server without `speculative` drafts it (`learn=False`: without learning the edit);
- `ngram_simple`: llama.cpp's `common_ngram_simple_draft` (common/ngram-map.cpp), what
  `llama-server --spec-type ngram-simple` drafts: at every step where the last `n` tokens
  occurred before, the `m` tokens that followed (none when fewer than `n` follow).

Counted as the servers count: drafted and taken draft tokens, and decode steps = the steps
after the prompt's (each writes one token and the draft tokens it takes).
"""

from __future__ import annotations

from collections.abc import Callable

from sluicegate.engines.llamacpp.speculative import NgramDrafter, SpeculativeSettings, Speculator

Counts = tuple[int, int, int]  # drafted, taken, decode steps after the prompt's


def _drive(
    output: list[int],
    history: list[int],
    propose: Callable[[list[int], int], list[int]],
    on_verified: Callable[[int, int], None],
    rows: list[int] | None = None,
) -> Counts:
    """Steps over `output` (its first token written by the prompt's step); `propose(history,
    room)` is the draft after `history` (ending with the token to decode next). `rows` gets
    each step's rows (1 + its draft), to weigh the steps by a decode's cost (decode_ceiling.py)."""
    done, drafted, taken_all, steps = 1, 0, 0, 0
    while done < len(output):
        draft = propose(history, len(output) - done - 1)
        if rows is not None:
            rows.append(1 + len(draft))
        taken = 0
        while taken < len(draft) and draft[taken] == output[done + taken]:
            taken += 1
        if draft:
            on_verified(len(draft), taken)
        drafted, taken_all, steps = drafted + len(draft), taken_all + taken, steps + 1
        history += output[done : done + taken + 1]
        done += taken + 1
    return drafted, taken_all, steps


def ours(prompt: list[int], output: list[int], ngram: int, draft_max: int) -> Counts:
    settings = SpeculativeSettings(kind="ngram", ngram_size=ngram, draft_max=draft_max)
    speculator = Speculator(settings, NgramDrafter(settings, 1), "replay", 1)
    speculator.start(0, None, len(prompt))

    def propose(history: list[int], room: int) -> list[int]:
        if not speculator.drafting(0):
            return []
        return speculator.draft([(0, history, max(0, min(speculator.most(0), room)))])[0]

    return _drive(output, [*prompt, output[0]], propose, lambda d, t: speculator.record(0, d, t))


def predicted(
    prompt: list[int],
    output: list[int],
    prediction: list[int],
    draft_max: int,
    *,
    learn: bool = True,
    rows: list[int] | None = None,
) -> Counts:
    """A request's prediction as its drafts (no `speculative` on the model)."""
    from sluicegate.engines.llamacpp import prediction as module

    kept = module.MOST_SUBSTITUTIONS
    module.MOST_SUBSTITUTIONS = kept if learn else 0
    try:
        speculator = Speculator(SpeculativeSettings(kind="ngram", draft_max=draft_max), None, "replay", 1)
        speculator.start(0, prediction, len(prompt))

        def propose(history: list[int], room: int) -> list[int]:
            if not speculator.drafting(0):
                return []
            return speculator.draft([(0, history, max(0, min(speculator.most(0), room)))])[0]

        return _drive(output, [*prompt, output[0]], propose, lambda d, t: speculator.record(0, d, t), rows)
    finally:
        module.MOST_SUBSTITUTIONS = kept


def ngram_simple(prompt: list[int], output: list[int], n: int, m: int) -> Counts:
    def propose(history: list[int], room: int) -> list[int]:
        # llama.cpp's arguments: the tokens so far without the last sampled one, and that one.
        tokens, length = history[:-1], len(history) - 1
        if length <= n + m + 1:
            return []
        pattern = history[length - n + 1 :]
        for j in range(length - n - 1, 0, -1):  # the nearest earlier occurrence (never at 0)
            if tokens[j : j + n] == pattern:
                copy = min(m, length - (j + n))
                return tokens[j + n : j + n + copy][:room] if copy >= n else []
        return []

    return _drive(output, [*prompt, output[0]], propose, lambda d, t: None)
