"""The one accumulator: folds the canonical stream into the final result.

Non-streaming bodies, stored responses and end-of-stream summaries all come from here, so a
streamed and a non-streamed request can never disagree about what was generated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from sluicegate.core.errors import ErrorInfo
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    LoadFinished,
    Usage,
    UsageReport,
    usage_with_fallback,
)


class ChatResult:
    """What a generation produced. A plain class, not a dataclass: compiled, a dataclass is made
    through the interpreted `__init__` that `dataclasses` writes (~2.5 k instructions, and one
    more for its `Usage` factory); this one's is native. One is made per stream."""

    __slots__ = (
        "error",
        "finish_reason",
        "generation_seconds",
        "items",
        "load_seconds",
        "stop_word",
        "time_to_first_token",
        "usage",
    )

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.usage = Usage()
        self.finish_reason: FinishReason | None = None
        self.stop_word: str | None = None  # the stop string that ended it (`Finished.stop_word`)
        self.error: ErrorInfo | None = None
        self.load_seconds: float | None = None  # set when this request loaded the model
        self.time_to_first_token: float | None = None
        self.generation_seconds = 0.0  # first token to end

    def text_of(self, kind: ItemKind) -> str | None:
        """All text of one kind joined, or None when there was none."""
        texts = [item.text_so_far for item in self.items if item.kind is kind]
        return "".join(texts) if texts else None

    def of_kind(self, kind: ItemKind) -> list[Item]:
        return [item for item in self.items if item.kind is kind]

    @property
    def tokens_per_second(self) -> float:
        if self.generation_seconds <= 0 or self.usage.completion_tokens <= 1:
            return 0.0
        return (self.usage.completion_tokens - 1) / self.generation_seconds


# Per token: an enum member lookup costs ~100 ns in Python 3.11; `Final`, compiled, a C static.
_REASONING: Final = ItemKind.REASONING


class Accumulator:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        # The clock is a parameter, not `time` patched in tests: compiled, this module's
        # reference to `time` is fixed when it loads (docs/compiled.md).
        self._clock = clock
        self.result = ChatResult()
        self._started = clock()
        self._first_token_at: float | None = None
        self.open_items: dict[int, Item] = {}
        self._deltas = 0  # for usage when the stream is cancelled before its final count
        self._reasoning_deltas = 0

    def feed(self, event: Event) -> None:
        if type(event) is ItemDelta and self._first_token_at is not None:  # per token
            self._deltas += 1
            if event.item.kind is _REASONING:
                self._reasoning_deltas += 1
            return
        # `isinstance`, not `match`: compiled, a class pattern is a generic `PyObject_IsInstance`
        # (~250 instructions a case tried), `isinstance` of one of our classes a type compare.
        if isinstance(event, ItemDelta):
            self._deltas += 1
            if event.item.kind is ItemKind.REASONING:
                self._reasoning_deltas += 1
            if self._first_token_at is None:
                self._first_token_at = self._clock()
                self.result.time_to_first_token = self._first_token_at - self._started
        elif isinstance(event, ItemAdded):
            item = event.item
            self.open_items[item.index] = item
        elif isinstance(event, ItemDone):
            item = event.item
            self.open_items.pop(item.index, None)
            self.result.items.append(item)
        elif isinstance(event, UsageReport):
            self.result.usage = event.usage
        elif isinstance(event, Finished):
            self.result.finish_reason = event.reason
            self.result.stop_word = event.stop_word
            self._stop_clock()
        elif isinstance(event, Failed):
            self.result.error = event.error
            # Items a failure cut off stay open (never done) but are part of the result.
            self.result.items.extend(sorted(self.open_items.values(), key=_by_index))
            self.result.items.sort(key=_by_index)
            self.open_items.clear()
            self._stop_clock()
        elif isinstance(event, LoadFinished):
            self.result.load_seconds = event.seconds
            self._started = self._clock()  # time to first token starts after loading

    def usage_so_far(self) -> Usage:
        """Usage as far as it is known, also for a stream cancelled before its final count."""
        return usage_with_fallback(self.result.usage, self._deltas, self._reasoning_deltas) or Usage()

    def snapshot(self) -> list[Item]:
        """Every item so far in output order, finished or not (`Item.done` tells which)."""
        return sorted([*self.result.items, *self.open_items.values()], key=_by_index)

    def _stop_clock(self) -> None:
        if self._first_token_at is not None:
            self.result.generation_seconds = self._clock() - self._first_token_at


def _by_index(item: Item) -> int:
    """(Not a lambda in `feed`: compiled, a lambda there made an environment object per call,
    that is per token.)"""
    return item.index
