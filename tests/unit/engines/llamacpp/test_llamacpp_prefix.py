"""The one count of a cache's reusable prefix (`runtime.shared_prefix`): the runtime's own
prompt reuse, the scheduler's choice of a slot (and of one to copy from) and the draft model's
catch-up all keep what it says."""

from __future__ import annotations

import pytest

from sluicegate.engines.llamacpp import runtime, scheduler, speculative
from sluicegate.engines.llamacpp.runtime import shared_prefix


@pytest.mark.parametrize(
    ("cached", "prompt", "same"),
    [
        ([], [1, 2], 0),
        ([1, 2, 3], [], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3, 4], [1, 2], 2),  # the cache holds more than the prompt
        ([1, 2], [1, 2, 3, 4], 2),  # the prompt goes on past the cache
        ([1, 9, 3], [1, 2, 3], 1),  # the first difference ends it, whatever follows
        ([7, 2, 3], [1, 2, 3], 0),
    ],
)
def test_the_shared_prefix_is_counted_to_the_first_difference(
    cached: list[int], prompt: list[int], same: int
) -> None:
    assert shared_prefix(cached, prompt) == same


def test_every_cache_of_the_engine_counts_it_the_same_way() -> None:
    assert scheduler.shared_prefix is speculative.shared_prefix is runtime.shared_prefix
