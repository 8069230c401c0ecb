"""Which HTTP client reads an upstream's token stream cheapest: httpx, aiohttp, or the one the
`openai` engine uses (`engines/upstream/http.py`, httptools on an asyncio protocol).

Run from the repository root (venv active): `python bench/upstream_clients.py`

It starts `bench/fast_upstream.py` in its own process and, in this one (uvloop), reads rounds of
16 concurrent 2,000-token streams with each client, interleaved, printing this process's CPU
time per token and tokens/s. aiohttp is not a Sluicegate dependency: it is measured when
installed and skipped, with a message, when not.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import uvloop

from sluicegate.engines.upstream.http import HttpPool

BODY = b'{"model":"fake-d0","stream":true,"max_tokens":2000,"messages":[]}'
STREAMS, TOKENS, ROUNDS = 16, 2000, 3


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def with_httpx(url: str, n: int) -> None:
    async with httpx.AsyncClient(base_url=url + "/", limits=httpx.Limits(max_connections=None)) as client:

        async def one() -> None:
            async with client.stream("POST", "chat/completions", content=BODY) as r:
                async for _ in r.aiter_raw():
                    pass

        await asyncio.gather(*(one() for _ in range(n)))


async def with_aiohttp(url: str, n: int) -> None:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with session.post(url + "/chat/completions", data=BODY) as r:
                async for _ in r.content.iter_any():
                    pass

        await asyncio.gather(*(one() for _ in range(n)))


async def with_pool(url: str, n: int) -> None:
    pool = HttpPool(url, {}, connect_timeout=5)

    async def one() -> None:
        r = await pool.post_stream("/chat/completions", BODY)
        async for _ in r.chunks():
            pass
        await r.aclose()

    await asyncio.gather(*(one() for _ in range(n)))
    await pool.aclose()


async def measure(url: str) -> None:
    clients: dict[str, Callable[[str, int], Awaitable[None]]] = {"httpx": with_httpx}
    try:
        import aiohttp  # noqa: F401

        clients["aiohttp"] = with_aiohttp
    except ImportError:
        print("aiohttp is not installed: skipped (pip install aiohttp to compare it)")
    clients["sluicegate (httptools)"] = with_pool
    for r in range(ROUNDS):
        for name, read in clients.items():
            await read(url, 2)  # warm up
            c0, t0 = cpu(), time.perf_counter()
            for _ in range(4):
                await read(url, STREAMS)
            c, t = cpu() - c0, time.perf_counter() - t0
            tokens = 4 * STREAMS * TOKENS
            print(f"round {r}  {name:<24}{c / tokens * 1e6:6.2f} µs CPU/token {tokens / t:>10,.0f} tokens/s")


@contextlib.contextmanager
def fast_upstream() -> Iterator[str]:
    """`bench/fast_upstream.py` in its own process; yields its OpenAI base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    upstream = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("fast_upstream.py")), "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1),
            ):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        upstream.terminate()
        upstream.wait()


def main() -> None:
    with fast_upstream() as url:
        uvloop.run(measure(url))


if __name__ == "__main__":
    main()
