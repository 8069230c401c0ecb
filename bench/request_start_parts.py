"""Each request-start cut of round eight (issue 38) alone, in process: the way before against
the way now, alternating, µs per request.

    python bench/request_start_parts.py [--rounds 7] [--number 20000]

Through the whole server a cut of a few µs is below what one request's CPU (~700 µs, ±10%
from run to run on a shared machine) resolves, so each is timed here on its own, with the
inputs the bench's request gives it (`bench/request_start.py`: a one-message Chat Completions
body). The "before" column runs what the code did before the cut, still callable (the library
call it made, or the old lines); "now" the code as it is. Medians of `--rounds` rounds, each
`--number` calls of either, in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Histogram
from starlette.datastructures import QueryParams
from starlette.requests import Request
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from sluicegate.core.json_limits import check_json_depth, may_nest_deeper
from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine
from sluicegate.observe.metrics import LATENCY_BUCKETS, METRICS, Metrics, child
from sluicegate.observe.requests import RequestObserver
from sluicegate.transport.answer_first import _first_done
from sluicegate.turn.runner import NO_QUERY

BODY = orjson.dumps(
    {
        "model": "fake-d0",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1,
    }
)


def timed(fn: Callable[[], object], number: int) -> float:
    started = time.process_time()
    for _ in range(number):
        fn()
    return (time.process_time() - started) * 1e6 / number


def timed_async(make: Callable[[], Any], number: int) -> float:
    async def run() -> float:
        started = time.process_time()
        for _ in range(number):
            await make()
        return (time.process_time() - started) * 1e6 / number

    return asyncio.run(run())


def engine() -> OpenAIUpstreamEngine:
    return OpenAIUpstreamEngine(parse_config({"id": "m", "base_url": "http://127.0.0.1:1/v1"}, auth="bearer"))


def cases(number: int) -> dict[str, tuple[Callable[[], float], Callable[[], float]]]:
    up = engine()
    value = orjson.loads(BODY)

    def info_twice() -> None:
        up.info()
        up.info()

    def depth_walk() -> None:
        check_json_depth(value, 64)

    def depth_shortcut() -> None:
        if may_nest_deeper(BODY, 64):
            check_json_depth(value, 64)

    def request(messages: list[dict[str, Any]]) -> Request:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)

    message = {"type": "http.request", "body": BODY, "more_body": False}

    async def body_by_stream() -> bytes:  # what read_json did: Starlette's `request.stream()`
        chunks = [chunk async for chunk in request([message]).stream()]
        return b"".join(chunks)

    async def body_by_receive() -> bytes:  # what it does now
        receive = request([message]).receive
        chunks: list[bytes] = []
        while True:
            got = await receive()
            if got["type"] != "http.request":
                continue
            if got.get("body"):
                chunks.append(got["body"])
            if not got.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    metrics = Metrics()
    key = metrics.key("sluicegate_requests_total", dialect="chat_completions", status="200")
    histogram = metrics.requests.labels("chat_completions", "m", "200")  # a plain series
    library = Histogram(  # prometheus-client's own, as the series were before round eleven
        "h", "h", ["dialect"], buckets=LATENCY_BUCKETS, registry=CollectorRegistry()
    ).labels("chat_completions")
    access = logging.getLogger("sluicegate.access")
    access.setLevel(logging.WARNING)  # as `--log-level warning` (the benches) sets it
    observer = RequestObserver("chat_completions", "POST", "/v1/chat/completions", "req_1", model="m")

    def end_before() -> None:  # the access line's fields built, then `log` drops it
        observer.ended = False
        fields = {"request_id": observer.request_id, "method": observer.method, "path": observer.path}
        fields |= {"dialect": observer.dialect, "model": observer.model, "status": 200, "ttft_seconds": 0.001}
        fields |= {"total_seconds": 0.002, "tokens_in": 0, "tokens_out": 1}
        access.log(
            logging.INFO,
            '"%s %s" %d%s %stotal=%.3fs%s id=%s',
            "POST",
            "/",
            200,
            "",
            "",
            0.0,
            "",
            "r",
            extra={"access": fields},
        )

    def end_now() -> None:
        if access.isEnabledFor(logging.INFO):
            raise AssertionError("the access log is on")

    async def wait_before() -> None:
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()
        loop.call_soon(a.set_result, None)
        await asyncio.wait({a, b}, timeout=15.0, return_when=asyncio.FIRST_COMPLETED)

    async def wait_now() -> None:
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()
        loop.call_soon(a.set_result, None)
        await _first_done(a, b, 15.0)

    active = metrics.key("sluicegate_generations_active", model="m")
    scope = {"type": "http", "client": ("127.0.0.1", 5000), "headers": [(b"host", b"x")] * 8}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    proxied = ProxyHeadersMiddleware(app)  # type: ignore[arg-type]

    class Ended:  # a body iterator whose end is already in: what `_drain` found every time
        complete = True

        def __aiter__(self) -> Ended:
            return self

        async def __anext__(self) -> bytes:
            raise StopAsyncIteration

    ended = Ended()

    async def drain_before() -> None:  # `_drain`: the end read under a timer
        async with asyncio.timeout(0.05):
            async for _ in ended:
                pass

    async def drain_now() -> None:  # `response.received` first
        if not ended.complete:
            raise AssertionError

    return {
        "body end: drained under asyncio.timeout / checked": (
            lambda: timed_async(drain_before, number),
            lambda: timed_async(drain_now, number),
        ),
        "proxy headers layer: on / off": (
            lambda: timed_async(lambda: proxied(scope, None, None), number),  # type: ignore[arg-type]
            lambda: timed_async(lambda: app(scope, None, None), number),
        ),
        "query: QueryParams('') / shared empty": (
            lambda: timed(lambda: QueryParams(b""), number),
            lambda: timed(lambda: NO_QUERY, number),
        ),
        "queue depth: labels() / child(), inc + dec": (
            lambda: timed(
                lambda: (metrics.queue_depth.labels("m").inc(), metrics.queue_depth.labels("m").dec()), number
            ),
            lambda: timed(
                lambda: (child(metrics.queue_depth, "m").inc(), child(metrics.queue_depth, "m").dec()), number
            ),
        ),
        "generations active: add_gauge / gauges[key], +1 -1": (
            lambda: timed(
                lambda: (
                    metrics.add_gauge("sluicegate_generations_active", 1, model="m"),
                    metrics.add_gauge("sluicegate_generations_active", -1, model="m"),
                ),
                number,
            ),
            lambda: timed(
                lambda: (
                    metrics.gauges.__setitem__(active, metrics.gauges[active] + 1),
                    metrics.gauges.__setitem__(active, metrics.gauges[active] - 1),
                ),
                number,
            ),
        ),
        "upstream ModelInfo: twice (check + vision) / once": (
            lambda: timed(info_twice, number),
            lambda: timed(up.info, number),
        ),
        "JSON depth: walk / bracket count": (
            lambda: timed(depth_walk, number),
            lambda: timed(depth_shortcut, number),
        ),
        "body: request.stream() / receive": (
            lambda: timed_async(body_by_stream, number),
            lambda: timed_async(body_by_receive, number),
        ),
        "requests_total: METRICS.inc / counters[key]": (
            lambda: timed(
                lambda: METRICS.inc("sluicegate_requests_total", dialect="chat_completions", status="200"),
                number,
            ),
            lambda: timed(lambda: metrics.counters.__setitem__(key, metrics.counters[key] + 1), number),
        ),
        "request histogram: library observe / plain series": (
            lambda: timed(lambda: library.observe(0.002), number),
            lambda: timed(lambda: histogram.observe(0.002), number),
        ),
        "access line off: fields built / not": (
            lambda: timed(end_before, number),
            lambda: timed(end_now, number),
        ),
        "answer wait: asyncio.wait / _first_done": (
            lambda: timed_async(wait_before, number),
            lambda: timed_async(wait_now, number),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    print("cut                                               before    now  (µs per request, medians)")
    total = 0.0
    for name, (before, now) in cases(args.number).items():
        b, n = [], []
        for _ in range(args.rounds):
            b.append(before())
            n.append(now())
        mb, mn = statistics.median(b), statistics.median(n)
        print(f"  {name:<48} {mb:6.2f} {mn:6.2f}  saves {mb - mn:5.2f}", flush=True)
        total += mb - mn
    print(f"  {'all of them':<48} {'':6} {'':6}  saves {total:5.2f}")


if __name__ == "__main__":
    main()
