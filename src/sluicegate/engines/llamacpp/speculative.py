"""Speculative decoding: drafts of the next few tokens, verified by the target in its batch.

A draft comes from the request's prediction (OpenAI's `prediction`, prediction.py) when it
has one — and where the output has left the prediction, from an n-gram lookup in the sequence's
own text, as below (the model's own index with `speculative = "ngram"`, else one of the
sequence's own) — else from the model's drafter, one of two:

- `NgramDrafter`: the sequence's own text (prompt and output). Where the last `ngram_size`
  tokens occurred before, the tokens that followed then are the guess (llama.cpp's
  `ngram-simple`, `common/ngram-map.cpp`). Costs a dict lookup; pays off where the output
  repeats the prompt — an agent rewriting a file it was shown.
- `ModelDrafter`: a small model with the same vocabulary, loaded beside the target with one KV
  stream per slot. It decodes the drafts greedily, every drafting sequence in one batch per
  draft position, and stops a sequence's draft where its top token is less likely than
  `draft_p_min`.

How long a draft each sequence may propose, and whether it drafts at all, follows how its
drafts have fared (adaptive.py): drafting backs off where drafts miss and comes back where they
land again.

The scheduler puts `[next token, *draft]` in the step's one batch (scheduler.py) with logits on
every row, and the sequence samples row after row with its own sampler chain while what it
samples equals the draft (sequence.py). That rule — a draft token is taken iff the target's
own draw is that token — leaves the output exactly what decoding without a draft gives: the
same tokens at temperature 0, the same distribution when sampling (each token is still drawn
from the target's distribution given the tokens before it). The rejected rows' cells are
removed from the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import llama_cpp

from sluicegate.core.errors import EngineFailure
from sluicegate.engines.llamacpp.adaptive import Gauge, ModelRate
from sluicegate.engines.llamacpp.prediction import Prediction
from sluicegate.engines.llamacpp.runtime import shared_prefix
from sluicegate.observe.metrics import METRICS

if TYPE_CHECKING:
    from sluicegate.engines.llamacpp.runtime import LlamaRuntime

Kind = Literal["ngram", "draft"]
DRAFTED_METRIC = "sluicegate_llamacpp_draft_tokens_total"
ACCEPTED_METRIC = "sluicegate_llamacpp_draft_tokens_accepted_total"


@dataclass(frozen=True, slots=True)
class SpeculativeSettings:
    kind: Kind
    draft_model: Path | None = None  # kind "draft"
    draft_max: int = 16  # tokens drafted per step at most
    draft_min: int = 0  # a shorter draft is not tried (the step decodes one token)
    draft_p_min: float = 0.75  # kind "draft": the draft stops where its top token is less likely
    ngram_size: int = 12  # kind "ngram": the tokens a match needs (llama.cpp's default)
    # Kind "draft": False drafts up to `draft_max` at every step whatever the drafts bring, as
    # llama-server does; True (the default) backs off where they miss (adaptive.py).
    draft_adaptive: bool = True


# One drafting sequence: (slot id, its tokens so far ending with the one to decode next, the
# most it may draft).
Want = tuple[int, list[int], int]


class NgramIndex:
    """Where each n-gram of a token list last ended, kept as the list grows."""

    __slots__ = ("_ends", "_indexed", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self._ends: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # ends below this are in `_ends`

    def draft(self, tokens: list[int], most: int, least_match: int = 0) -> list[int]:
        """The tokens that followed the last earlier occurrence of `tokens`' last n-gram, when
        that occurrence matches the tokens before it over `least_match` tokens at least (a
        longer match is a likelier copy: `adaptive.py` tunes it)."""
        n, end = self.n, len(tokens)
        if end < self._indexed:  # not the list it indexed: start over
            self._ends.clear()
            self._indexed = 0
        ends = self._ends
        for stop in range(max(self._indexed, n), end):  # every end but the current one
            ends[tuple(tokens[stop - n : stop])] = stop
        self._indexed = max(self._indexed, end)
        if end <= n or most <= 0:
            return []
        found = ends.get(tuple(tokens[end - n :]))
        if found is None:
            return []
        if least_match > n:  # the match goes on backwards far enough?
            reach = min(least_match, found)
            back = n
            while back < reach and tokens[found - 1 - back] == tokens[end - 1 - back]:
                back += 1
            if back < least_match:
                return []
        draft = tokens[found : found + most]
        # An image's positions stand as negative ids (vision.py): never a token to decode.
        return draft if min(draft, default=0) >= 0 else draft[: next(i for i, t in enumerate(draft) if t < 0)]


class NgramDrafter:
    def __init__(self, settings: SpeculativeSettings, slots: int) -> None:
        self.settings = settings
        self._indices = [NgramIndex(settings.ngram_size) for _ in range(slots)]

    def reset(self, slot: int) -> None:
        """A new sequence in `slot`."""
        self._indices[slot] = NgramIndex(self.settings.ngram_size)

    def drop(self, slot: int) -> None:
        self.reset(slot)

    def index(self, slot: int) -> NgramIndex:
        """The slot's index: the `Speculator` drafts from it with the match its gauge asks."""
        return self._indices[slot]


def check_vocabularies(target: LlamaRuntime, draft: LlamaRuntime) -> None:
    """A draft model must tokenize as the target does: its guesses are token ids."""
    if target.n_vocab != draft.n_vocab:
        raise EngineFailure(
            f"the draft model's vocabulary has {draft.n_vocab} tokens, the target's {target.n_vocab}: "
            "a draft model needs the target's vocabulary",
            code="model_load_failed",
        )
    step = max(1, target.n_vocab // 512)
    for token in range(0, target.n_vocab, step):
        if target.piece(token) != draft.piece(token):
            raise EngineFailure(
                f"the draft model's token {token} is {draft.piece(token)!r}, the target's "
                f"{target.piece(token)!r}: a draft model needs the target's vocabulary",
                code="model_load_failed",
            )


class ModelDrafter:
    """A draft model's context, one KV stream per slot, kept in step with each slot's tokens."""

    def __init__(self, settings: SpeculativeSettings, runtime: LlamaRuntime) -> None:
        import numpy  # noqa: F401 - `_pick` reads logits with it: imported at load, not mid-decode

        self.settings = settings
        self.runtime = runtime
        self._cached: list[list[int]] = [[] for _ in range(runtime.sequences)]
        self._batch: Any = llama_cpp.llama_batch_init(runtime.batch_size, 0, 1)
        self.steps = 0  # the draft model's decodes (tests read it)

    def reset(self, slot: int) -> None:
        """A new sequence: its tokens' common prefix with what the stream holds is kept."""

    def drop(self, slot: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.runtime.context.memory, slot, -1, -1)
        self._cached[slot].clear()

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)

    def _decode(self, rows: list[tuple[int, int, bool]]) -> None:
        """One decode of (slot, token, logits?) rows, each at the end of its slot's stream."""
        batch, cached = self._batch, self._cached
        for n, (slot, token, logits) in enumerate(rows):
            batch.token[n] = token
            batch.pos[n] = len(cached[slot])
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = slot
            batch.logits[n] = logits
            cached[slot].append(token)
        batch.n_tokens = len(rows)
        status = llama_cpp.llama_decode(self.runtime.context.ctx, batch)
        self.steps += 1
        if status != 0:
            for slot, *_ in rows:
                self.drop(slot)
            raise EngineFailure(f"the draft model's llama_decode failed ({status})", code="decode_failed")

    def _catch_up(self, wants: list[Want]) -> None:
        """Bring every stream to its tokens but the last (which the first draft step decodes)."""
        runtime, memory = self.runtime, self.runtime.context.memory
        pending: list[tuple[int, list[int]]] = []
        for slot, tokens, _ in wants:
            cached = self._cached[slot]
            keep = min(shared_prefix(cached, tokens), len(tokens) - 1)
            if keep < len(cached):
                if not llama_cpp.llama_memory_seq_rm(memory, slot, keep, -1):
                    keep = 0
                    self.drop(slot)
                del cached[keep:]
            if not runtime.reusable(slot, keep):  # a sliding window moved past the prefix
                keep = 0
                self.drop(slot)
            pending.append((slot, tokens[keep:-1]))
        rows: list[tuple[int, int, bool]] = []
        for slot, tokens in pending:
            for token in tokens:
                rows.append((slot, token, False))
                if len(rows) == runtime.batch_size:
                    self._decode(rows)
                    rows = []
        if rows:
            self._decode(rows)

    def _pick(self, row: int) -> tuple[int, float]:
        """The draft model's top token at `row` of its last decode, and its probability (1.0
        when no `draft_p_min` needs it)."""
        import numpy as np  # a draft model's server only (bindings.py)

        runtime = self.runtime
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(runtime.context.ctx, row), shape=(runtime.n_vocab,)
        )
        token = int(logits.argmax())
        if self.settings.draft_p_min <= 0:
            return token, 1.0
        return token, 1.0 / float(np.exp(logits - logits[token]).sum())

    def draft(self, wants: list[Want]) -> list[list[int]]:
        # A prompt with images (negative ids in its tokens, vision.py) is not the draft model's:
        # it reads text only. Such a sequence gets no draft.
        wants = [(slot, tokens, most if min(tokens) >= 0 else 0) for slot, tokens, most in wants]
        self._catch_up([want for want in wants if want[2] > 0])
        drafts: list[list[int]] = [[] for _ in wants]
        # (index in wants, slot, token to decode)
        going = [(i, slot, tokens[-1]) for i, (slot, tokens, most) in enumerate(wants) if most > 0]
        p_min = self.settings.draft_p_min
        while going:
            self._decode([(slot, token, True) for _, slot, token in going])
            more = []
            for row, (i, slot, _) in enumerate(going):
                token, p = self._pick(row)
                if p < p_min:
                    continue
                drafts[i].append(token)
                if len(drafts[i]) < wants[i][2]:
                    more.append((i, slot, token))
            going = more
        return drafts


# A verification decodes the next token and its draft as one batch of rows. llama.cpp's CPU
# matrix kernels take those rows in tiles of 4: Gemma 3 270M at depth 3,000 decodes 17 rows in
# 22% more time than 16, 5 rows in the time of 8 (bench/README.md, speculation round nine).
VERIFY_TILE = 4


def tiled(length: int) -> int:
    """A draft of `length` tokens cut to fill whole tiles of verification rows (its next token
    and the draft): 16 -> 15, 4..6 -> 3; one or two tokens stay (a tile of their own)."""
    if length < VERIFY_TILE - 1:
        return length
    return (length + 1) // VERIFY_TILE * VERIFY_TILE - 1


class Speculator:
    """What the scheduler asks for drafts: each slot's source (its request's prediction, else the
    model's n-gram lookup or draft model), how long a draft it may propose now (its `Gauge`,
    adaptive.py), and the counts of what the drafts brought."""

    def __init__(
        self,
        settings: SpeculativeSettings | None,
        drafter: NgramDrafter | ModelDrafter | None,
        model: str,
        slots: int,
    ) -> None:
        # Without `speculative`, only a request's prediction drafts, with the default limits.
        self.settings = settings or SpeculativeSettings(kind="ngram")
        self.drafter = drafter
        self.drafted = 0  # draft tokens put in a batch
        self.accepted = 0  # of them, taken
        self.model_rate = ModelRate()  # the model's own drafts' acceptance (not predictions')
        self._gauges: list[Gauge | None] = [None] * slots
        self._predictions: list[Prediction | None] = [None] * slots
        # A prediction's sequence's n-gram lookup where the output has left the prediction (a
        # model that loops, or writes text of its own that then repeats), when the model has no
        # n-gram drafter whose index it could use.
        self._lookups: list[NgramIndex | None] = [None] * slots
        self.active = 0  # slots whose sequence drafts: none, and a step skips drafting at once
        self._keys = (METRICS.key(DRAFTED_METRIC, model=model), METRICS.key(ACCEPTED_METRIC, model=model))

    def start(self, slot: int, prediction: list[int] | None, prompt_length: int) -> None:
        """A new sequence in `slot`, with its request's predicted output (tokens) or None."""
        settings = self.settings
        if self.drafter is not None:
            self.drafter.reset(slot)
        self._lookups[slot] = None
        if prediction:
            self._predictions[slot] = Prediction(prediction, prompt_length)
            if not isinstance(self.drafter, NgramDrafter):
                self._lookups[slot] = NgramIndex(settings.ngram_size)
            rate, cheap = 1.0, True  # the client said what is coming: start with long drafts
        else:
            self._predictions[slot] = None
            if self.drafter is None:
                self.end(slot)
                return
            rate, cheap = self.model_rate.rate, isinstance(self.drafter, NgramDrafter)
        self.active += self._gauges[slot] is None
        self._gauges[slot] = Gauge(
            most=settings.draft_max,
            least=settings.draft_min,
            match=settings.ngram_size,
            rate=rate,
            cheap=cheap,
        )

    def end(self, slot: int) -> None:
        """The slot's sequence left: it drafts no more."""
        self.active -= self._gauges[slot] is not None
        self._gauges[slot] = None
        self._predictions[slot] = None
        self._lookups[slot] = None

    def drop(self, slot: int) -> None:
        """The slot's cells were removed."""
        if self.drafter is not None:
            self.drafter.drop(slot)

    def shifted(self, slot: int) -> None:
        """The slot's context shifted (shift.py): what the drafter holds of it no longer lines
        up, so it starts over; a prediction's place in the output is lost, so it ends."""
        if self.drafter is not None:
            self.drafter.drop(slot)
        if self._predictions[slot] is not None:
            self.end(slot)

    def drafting(self, slot: int) -> bool:
        return self._gauges[slot] is not None

    def predicting(self, slot: int) -> bool:
        """The slot's request gave a prediction (its drafts are long: cut to whole tiles)."""
        return self._predictions[slot] is not None

    def most(self, slot: int) -> int:
        """The longest draft the slot's sequence may propose this step (0: none)."""
        gauge = self._gauges[slot]
        if gauge is None:
            return 0
        return self.settings.draft_max if self._fixed(slot) else gauge.allowance()

    def _fixed(self, slot: int) -> bool:
        """The draft model drafts in full at every step (`draft_adaptive = false`)."""
        return not self.settings.draft_adaptive and self._source(slot) is None

    def draft(self, wants: list[Want]) -> list[list[int]]:
        """Each want's draft (one shorter than `draft_min` is dropped). A want that may not
        draft (`most` 0) still lets an off sequence's shadow draft be checked."""
        least = max(self.settings.draft_min, 1)
        drafts: list[list[int]] = [[] for _ in wants]
        to_model: list[Want] = []
        where: list[int] = []
        for i, (slot, history, most) in enumerate(wants):
            gauge = self._gauges[slot]
            if gauge is None:
                continue
            source = self._source(slot)
            if source is None:  # the draft model
                if most >= least:
                    to_model.append((slot, history, most))
                    where.append(i)
            elif gauge.on:
                if most >= least:
                    draft = self._cheap(slot, source, history, most, gauge.match)
                    drafts[i] = draft if len(draft) >= least else []
            elif gauge.watch(history):
                shadow = self._cheap(slot, source, history, self.settings.draft_max, gauge.match)
                gauge.propose(shadow, len(history))
        if to_model:
            assert isinstance(self.drafter, ModelDrafter)
            for i, draft in zip(where, self.drafter.draft(to_model), strict=True):
                drafts[i] = draft if len(draft) >= least else []
                gauge = self._gauges[wants[i][0]]
                if not drafts[i] and gauge is not None:
                    gauge.no_probe()  # else an empty probe would probe again every step
        return drafts

    def _cheap(
        self, slot: int, source: Prediction | NgramIndex, history: list[int], most: int, match: int
    ) -> list[int]:
        """A cheap source's draft. A prediction that has none (the output left it and has not
        joined it again) hands over to the n-gram lookup: Gemma 3 270M asked for an edit of a
        300-line file copies 135 tokens, writes code of its own and loops on it; drafting from
        the prediction alone left the loop's 280 tokens undrafted (bench/README.md)."""
        draft = source.draft(history, most, match)
        if draft or source is not self._predictions[slot]:
            return draft
        lookup = self._lookups[slot]
        if lookup is None and isinstance(self.drafter, NgramDrafter):
            lookup = self.drafter.index(slot)
        return lookup.draft(history, most, match) if lookup is not None else []

    def _source(self, slot: int) -> Prediction | NgramIndex | None:
        prediction = self._predictions[slot]
        if prediction is not None:
            return prediction
        if isinstance(self.drafter, NgramDrafter):
            return self.drafter.index(slot)
        return None

    def record(self, slot: int, drafted: int, accepted: int) -> None:
        """A draft of the sequence in `slot` was verified."""
        self.drafted += drafted
        self.accepted += accepted
        counters = METRICS.counters
        counters[self._keys[0]] += drafted
        counters[self._keys[1]] += accepted
        gauge = self._gauges[slot]
        if gauge is not None and not self._fixed(slot):
            gauge.taken(drafted, accepted)
        if self._predictions[slot] is None:
            self.model_rate.add(drafted, accepted)

    def close(self) -> None:
        if isinstance(self.drafter, ModelDrafter):
            self.drafter.close()
