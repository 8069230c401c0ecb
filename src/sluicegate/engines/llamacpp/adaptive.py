"""How long a draft a sequence may propose now, learned from how its drafts fared.

A rejected draft is not free: each of its rows is a row of the target's batch (and of its
output layer, 262k wide for Gemma 3), so a workload whose drafts mostly miss runs slower with
speculation than without. Each drafting sequence has a `Gauge`:

- **Length** follows the runs it gets: a draft taken whole doubles the next one (up to
  `draft_max`); one refused whole halves it. One taken in part halves it too, but never below a
  token longer than what was taken, when the source is cheap (n-gram lookup, a prediction): in
  code and text that repeats, one run ending (a new name, a new number) says little about how
  long the next one is, and cutting the next draft to the last run's length left the long runs
  that follow half drafted (issue 48: 1.7x llama-server's decode steps on the continue
  workload). A draft model's next draft is a token longer than what was taken: each of its
  tokens costs a decode of the draft model.
- **Off**: two drafts in a row refused whole, or an acceptance rate (a moving average) below
  `OFF_RATE`, turn drafting off for the sequence. A cheap source (n-gram lookup, a prediction)
  then keeps proposing *shadow* drafts that are never decoded, only compared with what the
  target goes on to write; two shadows in a row that would have landed `SHADOW_LANDED` tokens
  turn drafting back on. A draft model's guesses cost a decode, so it probes instead: one short
  draft after `wait` tokens, the wait doubling after each failed probe (up to `MAX_PAUSE`).
- **Match** (n-gram lookup): the tokens an n-gram match must extend over before its draft is
  proposed; a draft refused whole lengthens it by `MATCH_STEP`, one taken whole sets it back to
  `ngram_size` (a run that landed whole says the text is copying again: waiting for a longer
  match then skips the start of every run).

`ModelRate` keeps the acceptance of all of a model's sequences: a new sequence starts from it
(a model whose drafts mostly miss starts its sequences cautious, or off).
"""

from __future__ import annotations

# Below this acceptance (moving average, per drafted token), drafting stops. Issue 48's 0.7x at
# 18% acceptance (Gemma 3 270M, CPU) puts a draft row at ~0.38 of a decode's fixed cost: a
# one-token draft then pays off above ~0.28.
OFF_RATE = 0.3
MATCH_STEP = 2  # a draft refused whole: the longer match the next one needs
MISSES_OFF = 2  # drafts in a row refused whole that stop drafting
SHADOW_LANDED = 2  # a shadow draft that would have brought this many tokens counts as landed
SHADOWS_ON = 2  # landed shadows in a row that turn drafting back on
FIRST_PAUSE = 8  # tokens before a draft model's first probe
MAX_PAUSE = 128  # the longest wait between a draft model's probes
PROBE = 2  # a probe's length
WEIGHT = 0.3  # the moving average's weight for the newest draft
MODEL_WEIGHT = 0.05  # the model's average's


class ModelRate:
    """The acceptance of a model's drafts over all its sequences (a moving average)."""

    __slots__ = ("rate",)

    def __init__(self) -> None:
        self.rate = 0.5  # no evidence yet: neither eager nor shy

    def add(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.rate += MODEL_WEIGHT * (accepted / drafted - self.rate)


class Gauge:
    """One sequence's drafting state (speculative.py's `Speculator` keeps one per slot)."""

    __slots__ = (
        "_longest",
        "cheap",
        "hits",
        "least",
        "length",
        "match",
        "misses",
        "most",
        "pause",
        "probing",
        "rate",
        "shadow",
        "shadow_at",
        "shortest_match",
        "wait",
    )

    def __init__(
        self, *, most: int, least: int, match: int, rate: float, cheap: bool, longest_match: int = 64
    ) -> None:
        self.most, self.least = most, max(least, 1)
        self.cheap = cheap  # shadows are free (n-gram, prediction), or probes (a draft model)
        self.rate = rate
        self.shortest_match, self.match = match, match
        self._longest = max(longest_match, match)
        self.misses = 0
        self.hits = 0  # landed shadows in a row
        self.shadow: list[int] | None = None  # off: a draft not decoded, checked against the output
        self.shadow_at = 0  # the history's length when it was drafted
        self.pause = FIRST_PAUSE
        self.wait = 0
        self.probing = False
        # A model whose drafts have mostly missed starts its sequences short, or off.
        if rate < OFF_RATE:
            self.length = 0
            self.wait = self.pause
        else:
            self.length = self.most if rate >= 0.5 else max(self.least, round(self.most * rate))

    @property
    def on(self) -> bool:
        return self.length > 0

    def allowance(self) -> int:
        """The longest draft to propose this step (0: none). A draft model's off sequence
        counts its wait down here and probes when it ends."""
        if self.length or self.cheap:
            return self.length
        self.wait -= 1
        if self.wait > 0:
            return 0
        self.probing = True
        return max(PROBE, self.least)

    def no_probe(self) -> None:
        """The probe found nothing to draft (the draft model not confident enough): wait again,
        no longer than before."""
        if self.probing:
            self.probing = False
            self.wait = self.pause

    def taken(self, drafted: int, accepted: int) -> None:
        """A draft was verified: `accepted` of its `drafted` tokens were the target's."""
        if not drafted:
            return
        self.rate += WEIGHT * (accepted / drafted - self.rate)
        if self.probing:  # a draft model's probe while off
            self.probing = False
            if accepted:
                self.pause = FIRST_PAUSE
                self.misses = 0
                self.rate = max(self.rate, OFF_RATE)
                self.length = self._clamp(accepted + 1)
            else:
                self.pause = min(self.pause * 2, MAX_PAUSE)
                self.wait = self.pause
            return
        if accepted == drafted:
            self.misses = 0
            self.length = self._clamp(max(self.length, 1) * 2)
            self.match = self.shortest_match
        elif accepted:
            self.misses = 0
            self.length = self._clamp(max(accepted + 1, self.length // 2) if self.cheap else accepted + 1)
        else:
            self.misses += 1
            self.length = self._clamp(self.length // 2)
            self.match = min(self._longest, self.match + MATCH_STEP)
        if self.misses >= MISSES_OFF or self.rate < OFF_RATE:
            self._off()

    def _clamp(self, length: int) -> int:
        return max(self.least, min(self.most, length))

    def _off(self) -> None:
        self.length = 0
        self.misses = 0
        self.hits = 0
        self.shadow = None
        self.wait = self.pause

    def watch(self, history: list[int]) -> bool:
        """Off, with a cheap source: settle the pending shadow against the tokens written since
        it was drafted. True when a new shadow may be drafted (none pending)."""
        shadow = self.shadow
        if shadow is None:
            return True
        since = history[self.shadow_at :]
        landed = 0
        for want, got in zip(shadow, since, strict=False):
            if want != got:
                break
            landed += 1
        if landed == len(since) and landed < len(shadow):
            return False  # right so far: the next tokens decide
        self.shadow = None
        self.rate += WEIGHT * (min(1.0, landed / min(len(shadow), landed + 1)) - self.rate)
        self.hits = self.hits + 1 if landed >= SHADOW_LANDED else 0
        if self.hits >= SHADOWS_ON:
            self.hits = 0
            self.rate = max(self.rate, 0.5)
            self.length = self._clamp(landed + 1)
        return True

    def propose(self, shadow: list[int], at: int) -> None:
        """Off: a draft the source would have proposed, to be checked against what follows."""
        if shadow:
            self.shadow, self.shadow_at = shadow, at
