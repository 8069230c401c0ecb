"""A request's predicted output (OpenAI's Predicted Outputs, `prediction`) as its draft source.

The client sends the text it expects most of the answer to be (the file being edited); the
prediction's tokens are the drafts. `Prediction` follows the output through them: while the
output goes on as the prediction does, the draft is what comes next in it; where the output
leaves it (the edit), the draft waits until the last `SYNC` output tokens occur in the
prediction again (the nearest such place at or after where the output left it, else the
first), and goes on from there. "Where the output left it" is where it last left a run it had
followed for `SYNC` tokens or more: a join that fails at once (a common 3-gram far off) does
not move it, else each such failure searched on from the wrong place, further and further.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

SYNC = 3  # output tokens that must match the prediction again before it drafts after an edit


def prediction_tokens(model: Any, text: str) -> list[int]:
    """The prediction as the model's tokens (no BOS, special tokens as text): read-only use of
    the vocabulary, safe from any thread."""
    tokens: list[int] = model.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    return tokens


class Prediction:
    __slots__ = ("_aligned", "_cursor", "_ends", "_joined", "_left", "_seen", "start", "tokens")

    def __init__(self, tokens: list[int], start: int) -> None:
        self.tokens = tokens
        self.start = start  # where the output starts in the history (the prompt's length)
        self._cursor = 0  # the prediction's next token, while aligned
        self._aligned = True
        self._left = 0  # where the output last left a run it followed (the joins search from it)
        self._joined = 0  # where the run followed now was joined
        self._seen = 0  # output tokens followed so far
        # Where each SYNC-gram of the prediction ends, in order.
        self._ends: dict[tuple[int, ...], list[int]] = {}
        for end in range(SYNC, len(tokens) + 1):
            self._ends.setdefault(tuple(tokens[end - SYNC : end]), []).append(end)

    def _follow(self, history: list[int]) -> None:
        tokens, start = self.tokens, self.start
        output = len(history) - start
        for i in range(self._seen, output):
            token = history[start + i]
            if self._aligned and self._cursor < len(tokens) and tokens[self._cursor] == token:
                self._cursor += 1
                continue
            if self._aligned and (self._cursor - self._joined >= SYNC or not self._joined):
                self._left = self._cursor  # a run it really followed (or the first) ended here
            self._aligned = False
            if i + 1 >= SYNC:
                ends = self._ends.get(tuple(history[start + i + 1 - SYNC : start + i + 1]))
                if ends:
                    at = bisect_left(ends, self._left)
                    self._cursor = self._joined = ends[at] if at < len(ends) else ends[0]
                    self._aligned = True
        self._seen = max(self._seen, output)

    def draft(self, history: list[int], most: int, least_match: int = 0) -> list[int]:
        """The prediction's next tokens after `history` (prompt, then the output so far, ending
        with the token to decode next), at most `most`. `least_match` is the n-gram source's
        knob: a prediction has none."""
        self._follow(history)
        if not self._aligned or most <= 0:
            return []
        return self.tokens[self._cursor : self._cursor + most]
