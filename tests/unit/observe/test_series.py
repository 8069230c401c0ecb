"""The series' bucket search: `bucket` is `bisect_left` (a value on a bound counts in that
bound's bucket, as prometheus-client's `observe` counts it), found natively when compiled."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest

from sluicegate.observe.metrics import LATENCY_BUCKETS, LOAD_BUCKETS, TOKEN_GAP_BUCKETS
from sluicegate.observe.series import Buckets, bucket


def values_around(bounds: tuple[float, ...]) -> list[float]:
    near = [x for b in bounds for x in (b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf))]
    return [*near, 0.0, -0.0, -1.0, 1e-9, 1e9, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("bounds", [TOKEN_GAP_BUCKETS, LATENCY_BUCKETS, LOAD_BUCKETS, (1.0,), ()])
def test_bucket_is_bisect_left(bounds: tuple[float, ...]) -> None:
    for value in values_around(bounds):
        assert bucket(bounds, value) == bisect_left(bounds, value), value


def test_a_value_on_a_bound_counts_in_that_bound_s_bucket() -> None:
    series = Buckets(TOKEN_GAP_BUCKETS)
    for value in (0.001, 0.0011, 2.56, 3.0):
        series.observe(value)
    assert series.counts[0] == 1 and series.counts[1] == 1
    assert series.counts[-2] == 1 and series.counts[-1] == 1  # 2.56 in its own, 3.0 in +Inf
    assert series.sum == pytest.approx(0.001 + 0.0011 + 2.56 + 3.0)
