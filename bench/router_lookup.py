"""A routed request's trip through the router: Starlette's `Router` against `ExactRouter`
(`app/routing.py`), on the app's real route table, in process.

    python bench/router_lookup.py [--requests 2000] [--repeats 5]

Each endpoint is replaced by a marker (as `tests/unit/app/test_routing.py` does), so the time is
the router's: finding the route and handing the request to it. Thread CPU time, the best of
`--repeats` loops of `--requests` each (the best of several is stable on a loaded machine).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from starlette.routing import Router

from sluicegate.app.factory import create_app
from sluicegate.app.routing import ExactRouter
from sluicegate.config import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit" / "app"))
from test_routing import _answer, _marked

PATHS = ("/v1/models", "/health", "/metrics", "/api/tags")


async def best_us(router: Router, path: str, requests: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time_ns()
        for _ in range(requests):
            await _answer(router, "GET", path)
        best = min(best, (time.thread_time_ns() - started) / requests / 1000)
    return best


async def run(requests: int, repeats: int) -> None:
    routes = _marked(list(create_app(Settings(data_dir=Path(tempfile.mkdtemp()))).routes))
    theirs, ours = Router(routes), ExactRouter(routes)
    print(f"{len(routes)} routes; µs per GET through the router (harness included)")
    for path in PATHS:
        library = await best_us(theirs, path, requests, repeats)
        exact = await best_us(ours, path, requests, repeats)
        print(
            f"  {path:12s} Starlette {library:6.1f}   ExactRouter {exact:6.1f}   ratio {exact / library:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.repeats))


if __name__ == "__main__":
    main()
