"""Every test module has a name of its own: pytest imports test modules by their basename (the
test folders have no __init__.py), so two of one name stop the whole run at collection — which
only a run of the whole suite sees, and three merges in a row brought one in."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        places[path.name].append(str(path.relative_to(TESTS)))
    assert {name: where for name, where in places.items() if len(where) > 1} == {}
