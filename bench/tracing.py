"""Benchmark: what OpenTelemetry tracing costs a request, off and on.

Run from the repository root (venv active): `python bench/tracing.py [--requests 400 --rounds 5]`

The app runs in this process behind httpx's ASGI transport (no sockets, so the numbers are the
server's own work): a scripted model answers a short streamed Chat Completions request of 16
words. Each round times --requests sequential requests three ways, alternating:

  off         no tracer (the default): every hook is an `is None` test
  on          a tracer with the SDK's BatchSpanProcessor and an exporter that drops the spans
              (what an operator's OTLP setup costs in-process, minus the network)
  baseline    as "off", a second time: the spread between two identical runs is the noise

It prints the median CPU time per request of each, and on/off and baseline/off as ratios.
"Off" costing nothing measurable means baseline/off and what `off` adds over the code before
tracing both sit inside that noise; the hooks when off are an attribute read per request (the
request span) and one per upstream call or tool round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from sluicegate.app.factory import create_app
from sluicegate.config import load_settings
from sluicegate.observe import tracing

SCRIPT = 'replies:\n  - content: "' + " ".join(f"w{i}" for i in range(16)) + '"\n'


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def run(app: object, requests: int) -> float:
    """CPU seconds per request for `requests` streamed chats, one at a time."""
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx.AsyncClient(transport=transport, base_url="http://sg") as client:
        for _ in range(20):  # warm-up
            await client.post("/v1/chat/completions", json=body)
        start = time.process_time()
        for _ in range(requests):
            response = await client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200
        return (time.process_time() - start) / requests


async def measure(folder: Path, requests: int, traced: bool) -> float:
    provider = None
    if traced:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
    tracing.use_provider(provider)
    app = create_app(load_settings(folder / "sluicegate.toml", env={}))
    try:
        async with app.router.lifespan_context(app):
            return await run(app, requests)
    finally:
        tracing.use_provider(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "reply.yaml").write_text(SCRIPT)
        (folder / "sluicegate.toml").write_text(
            '[server]\ndata_dir = "data"\n\n[[models]]\nid = "m"\nengine = "scripted"\nscript = "reply.yaml"\n'
        )
        results: dict[str, list[float]] = {"off": [], "on": [], "baseline": []}
        for _ in range(args.rounds):
            results["off"].append(asyncio.run(measure(folder, args.requests, traced=False)))
            results["on"].append(asyncio.run(measure(folder, args.requests, traced=True)))
            results["baseline"].append(asyncio.run(measure(folder, args.requests, traced=False)))
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, value in medians.items():
        print(f"{name:9s} {value * 1e6:8.1f} µs CPU per request (median of {args.rounds})")
    print(f"on / off        {medians['on'] / medians['off']:.3f}")
    print(f"baseline / off  {medians['baseline'] / medians['off']:.3f}  (the noise)")


if __name__ == "__main__":
    main()
