"""A request's predicted output (OpenAI's Predicted Outputs, `prediction`) as its draft source.

The client sends the text it expects most of the answer to be (the file being edited); the
prediction's tokens are the drafts. `Prediction` follows the output through them: while the
output goes on as the prediction does, the draft is what comes next in it; where the output
leaves it (the edit), the draft waits until the output's last tokens occur in the prediction
again, and goes on from there: `SYNC` of them at the nearest place after where the output left
it, within a short edit of it (a rename, an insertion); further off `FAR_SYNC` of them (the
nearest such place after where it left, else the first) — a 3-gram far off was as often a
false join, its draft refused whole. "Where the output left it" is where it last left a run it had
followed for `SYNC` tokens or more: a join that fails at once (a common 3-gram far off) does
not move it, else each such failure searched on from the wrong place, further and further.

**It learns the edit.** When the output leaves the prediction and joins it again a few tokens
on, the prediction's tokens it skipped were replaced by the ones it wrote (a rename: `runtime`
→ `backend`). That substitution is applied to the rest of the prediction, so its later
occurrences are drafted as their replacement and the drafts keep landing through a rename
(each variant of the name — `.runtime`, ` runtime` — is learned at its first occurrence). A
substitution the output undoes later (it writes the original where the replacement was
drafted) is dropped again. Only short edits are learned (`MOST_EDIT` tokens a side, at most
`MOST_SUBSTITUTIONS`): a long stretch skipped or written is an edit of that place, not a rule.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

SYNC = 3  # output tokens that must match the prediction again before it drafts after an edit
FAR_SYNC = 5  # the same for a join further than a short edit from where the output left it
MOST_EDIT = 8  # the longest side of a substitution it learns (tokens)
MOST_SUBSTITUTIONS = 32  # each one learned rewrites the rest of the prediction once
# Prediction tokens rewritten per request at most (~1.5 us each, on the worker thread between
# two decodes): a long prediction learns fewer substitutions than a 300-line file's 32.
MOST_REWRITTEN = 200_000


def prediction_tokens(model: Any, text: str) -> list[int]:
    """The prediction as the model's tokens (no BOS, special tokens as text): read-only use of
    the vocabulary, safe from any thread."""
    tokens: list[int] = model.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    return tokens


class Prediction:
    __slots__ = (
        "_aligned",
        "_by_first",
        "_changed",
        "_cursor",
        "_ends",
        "_far",
        "_joined",
        "_left",
        "_left_out",
        "_origin",
        "_rewritten",
        "_seen",
        "_substitutions",
        "learned",
        "original",
        "start",
        "tokens",
    )

    def __init__(self, tokens: list[int], start: int) -> None:
        self.original = tokens  # the prediction as sent
        self.tokens = list(tokens)  # as edited so far: the substitutions learned applied
        # Per token of `tokens`: the original token its piece starts at, and whether the piece
        # is a substitution's replacement.
        self._origin = list(range(len(tokens)))
        self._changed = [False] * len(tokens)
        self._substitutions: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._by_first: dict[int, list[tuple[int, ...]]] = {}  # keys by first token, longest first
        self.learned = 0  # substitutions learned (tests, the bench's traces)
        self._rewritten = 0  # prediction tokens rewritten so far (MOST_REWRITTEN)
        self.start = start  # where the output starts in the history (the prompt's length)
        self._cursor = 0  # the prediction's next token, while aligned
        self._aligned = True
        self._left = 0  # where the output last left a run it followed (the joins search from it)
        self._left_out = 0  # the output's own index there
        self._joined = 0  # where the run followed now was joined
        self._seen = 0  # output tokens followed so far
        self._ends: dict[tuple[int, ...], list[int]] = {}
        self._far: dict[tuple[int, ...], list[int]] = {}
        self._index()

    def _index(self) -> None:
        """Where each SYNC-gram and FAR_SYNC-gram of the prediction ends, in order."""
        tokens = self.tokens
        ends: dict[tuple[int, ...], list[int]] = {}
        far: dict[tuple[int, ...], list[int]] = {}
        for end in range(SYNC, len(tokens) + 1):
            ends.setdefault(tuple(tokens[end - SYNC : end]), []).append(end)
            if end >= FAR_SYNC:
                far.setdefault(tuple(tokens[end - FAR_SYNC : end]), []).append(end)
        self._ends, self._far = ends, far

    def _follow(self, history: list[int]) -> None:
        start = self.start
        output = len(history) - start
        for i in range(self._seen, output):
            token = history[start + i]
            tokens = self.tokens
            if self._aligned and self._cursor < len(tokens) and tokens[self._cursor] == token:
                self._cursor += 1
                continue
            if self._aligned and (self._cursor - self._joined >= SYNC or not self._joined):
                self._left = self._cursor  # a run it really followed (or the first) ended here
                self._left_out = i
            self._aligned = False
            self._join(history, start + i + 1, i)
        self._seen = max(self._seen, output)

    def _join(self, history: list[int], end: int, i: int) -> None:
        """Join the prediction again after output token `i` (ending `history` at `end`), if its
        last tokens occur in it: SYNC of them at the nearest place after where the output left
        the prediction, when that is within a short edit of it (a rename, an insertion: what
        `_learn` reads); anywhere else FAR_SYNC of them (the nearest after, else the first):
        a 3-gram far off is as often a false join, whose draft is refused whole."""
        if i + 1 < SYNC:
            return
        left = self._left
        ends = self._ends.get(tuple(history[end - SYNC : end]))
        if ends:
            at = bisect_left(ends, left)
            if at < len(ends) and ends[at] - left <= MOST_EDIT + SYNC:
                self._cursor = self._joined = ends[at]
                self._aligned = True
                self._learn(history[self.start + self._left_out : end - SYNC])
                return
        if i + 1 < FAR_SYNC:
            return
        ends = self._far.get(tuple(history[end - FAR_SYNC : end]))
        if ends:
            at = bisect_left(ends, left)
            self._cursor = self._joined = ends[at] if at < len(ends) else ends[0]
            self._aligned = True

    def _learn(self, written: list[int]) -> None:
        """The output left the prediction at `_left` and joined it again at `_cursor`: what it
        skipped (up to the join's SYNC tokens) was replaced by `written`."""
        skipped_from, skipped_to = self._left, self._cursor - SYNC
        if not (0 < skipped_to - skipped_from <= MOST_EDIT and 0 < len(written) <= MOST_EDIT):
            return  # an insertion, a deletion, or too long to be a rule
        changed, origin = self._changed, self._origin
        if any(changed[skipped_from:skipped_to]):
            # A replacement drafted here was not written: that substitution does not hold
            # (dropped; learned again at its next occurrence if it does there).
            for first in {origin[k] for k in range(skipped_from, skipped_to) if changed[k]}:
                key = self._key_at(first)
                if key is not None:
                    del self._substitutions[key]
                    self._by_first[key[0]].remove(key)
            self._rewrite(self._cursor)
            return
        if len(self._substitutions) >= MOST_SUBSTITUTIONS or self._rewritten > MOST_REWRITTEN - len(
            self.original
        ):
            return
        key = tuple(self.tokens[skipped_from:skipped_to])
        if key in self._substitutions:
            return
        self._substitutions[key] = tuple(written)
        keys = self._by_first.setdefault(key[0], [])
        keys.append(key)
        keys.sort(key=len, reverse=True)
        self.learned += 1
        self._rewrite(self._cursor)

    def _key_at(self, first: int) -> tuple[int, ...] | None:
        """The substitution whose original starts at original token `first`."""
        original = self.original
        for key in self._by_first.get(original[first], ()):
            if tuple(original[first : first + len(key)]) == key:
                return key
        return None

    def _rewrite(self, at: int) -> None:
        """The prediction from `at` on (from the next piece's start) made again from the
        original with the substitutions now known."""
        origin, n = self._origin, len(self.tokens)
        while 0 < at < n and origin[at] == origin[at - 1]:
            at += 1  # inside a replacement: from the next piece
        if at >= n:
            return
        tokens, origins, changed = self.tokens[:at], origin[:at], self._changed[:at]
        original, by_first, substitutions = self.original, self._by_first, self._substitutions
        k, end = origin[at], len(original)
        self._rewritten += end - k
        while k < end:
            for key in by_first.get(original[k], ()):
                if tuple(original[k : k + len(key)]) == key:
                    replacement = substitutions[key]
                    tokens += replacement
                    origins += [k] * len(replacement)
                    changed += [True] * len(replacement)
                    k += len(key)
                    break
            else:
                tokens.append(original[k])
                origins.append(k)
                changed.append(False)
                k += 1
        self.tokens, self._origin, self._changed = tokens, origins, changed
        self._index()

    def draft(self, history: list[int], most: int, least_match: int = 0) -> list[int]:
        """The prediction's next tokens after `history` (prompt, then the output so far, ending
        with the token to decode next), at most `most`. `least_match` is the n-gram source's
        knob: a prediction has none."""
        self._follow(history)
        if not self._aligned or most <= 0:
            return []
        return self.tokens[self._cursor : self._cursor + most]
