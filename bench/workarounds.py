"""What each of Sluicegate's departures from its libraries buys, against the library way, in-process.

Run from the repository root (venv active): `python bench/workarounds.py` (about a minute;
`--rounds 3` for a quicker look). Everything runs in this one process on uvloop, as under
uvicorn; results are ratios against a baseline measured in the same run, interleaved round by
round, with an A/A pair (the shipped app measured twice) that shows the noise.

The workarounds, each measured against the library way it replaces:

1. `app/factory.py` `SluicegateApp.__call__`: since round twelve a plain call handing on the
   middleware's awaitable (round eleven's inlined coroutine, measured below the noise, had been
   undone); the variant is that inlined coroutine (ratio < 1 would be its gain).
2. `app/factory.py` `TurnRoutes`: the chat routes dispatched before Starlette's exception
   middleware and router (the library way: the router finds them like any route).
3. `transport/sse.py` `server_send`: a stream's body frames written with the server's own `send`,
   skipping the middleware's send wrappers (the library way: through every middleware).
4. `core/owned.py` `Owned`: the runner's release list (the library way: `contextlib.AsyncExitStack`).
5. JSON spliced by hand for the per-token frame (`dialects/chat_completions/encoder.py`; the
   library way: `orjson.dumps` of the whole chunk), byte-identical output checked.
6. `engines/upstream/http.py` `HttpPool`: the upstream HTTP/1.1 client (the library way: httpx),
   reading 16 concurrent 2,000-token streams from `bench/fast_upstream.py` in its own process.

For 1-4 the app is driven through ASGI directly (no sockets), with the scripted engine:
CPU per short request (a 1-token reply), CPU per streamed token (a 200-token reply, minus the
short one, over 199), and memory per open stream (tracemalloc, 200 streams held mid-reply).
On a busy machine the CPU figures of a whole request swing by more than these workarounds
move them, so each is also measured alone, where the noise is small: one request through the
app's own layers to an empty endpoint (1, 2), an owner taking and releasing three releases (4),
and body frames written around or through the middleware (3).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import uvloop
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

import sluicegate.turn.runner as runner
from sluicegate.app.auth import APIKeyMiddleware
from sluicegate.app.factory import SluicegateApp, TurnRoutes, create_app
from sluicegate.config import load_settings
from sluicegate.core.events import ItemDelta, RawEvent, TextDelta
from sluicegate.core.events import ItemKind as Kind
from sluicegate.core.owned import Owned
from sluicegate.core.segment import segment
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder
from sluicegate.observe.requests import ObserveMiddleware
from sluicegate.transport.sse import SERVER_SEND, server_send

LONG_WORDS = 200
SCRIPT = f"""
replies:
  - when: {{user_contains: "hold"}}
    token_delay_ms: 600000
    content: "first second"
  - when: {{user_contains: "long"}}
    content: "{" ".join(f"w{i}" for i in range(LONG_WORDS))}"
  - content: "Hi"
"""


# --- the app variants ------------------------------------------------------------------------


class InlinedCall(Starlette):
    """Round eleven's removed workaround: Starlette's `__call__` inlined, still a coroutine."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        scope[SERVER_SEND] = send
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        await self.middleware_stack(scope, receive, send)


def through_middleware(scope: Any, send: Send) -> Send:
    return send


Variant = tuple[str, dict[str, bool]]
VARIANTS: list[Variant] = [
    ("shipped", {}),
    ("shipped (A/A)", {}),
    ("1 inlined __call__ (gone)", {"inlined": True}),
    ("2 router for chat", {"router": True}),
    ("3 bodies via middleware", {"middleware": True}),
    ("4 AsyncExitStack", {"exitstack": True}),
    ("2+3+4 library ways", {"router": True, "middleware": True, "exitstack": True}),
]


def build(folder: Path, library: dict[str, bool]) -> Starlette:
    (folder / "script.yaml").write_text(SCRIPT)
    (folder / "sluicegate.toml").write_text(
        '[server]\ndata_dir = "data"\n\n[[models]]\nid = "m"\nengine = "scripted"\n'
        'script = "script.yaml"\nmax_concurrency = 0\nmax_queue = 4096\n'
    )
    app = create_app(load_settings(folder / "sluicegate.toml", env={}))
    if library.get("router"):
        app.user_middleware = [m for m in app.user_middleware if m.cls is not TurnRoutes]
        app.middleware_stack = None
    if library.get("inlined"):
        app.__class__ = InlinedCall
    return app


@contextlib.contextmanager
def patched(library: dict[str, bool]) -> Iterator[None]:
    """The module-level library ways, for the time one variant is measured."""
    saved = runner.server_send, runner.Owned
    if library.get("middleware"):
        runner.server_send = through_middleware
    if library.get("exitstack"):
        runner.Owned = contextlib.AsyncExitStack  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        runner.server_send, runner.Owned = saved


# --- an ASGI client without sockets --------------------------------------------------------------


async def request(
    app: Starlette, text: str, on_body: Callable[[], None] | None = None, gone: asyncio.Event | None = None
) -> int:
    body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8321),
    }
    gone = gone or asyncio.Event()
    delivered = False
    frames = 0

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal frames
        if message["type"] == "http.response.body" and message.get("body"):
            frames += 1
            if frames == 1 and on_body is not None:
                on_body()

    await app(scope, receive, send)
    return frames


def cpu() -> float:
    return time.process_time()


async def cpu_per_request(app: Starlette, text: str, n: int) -> float:
    """Microseconds of CPU per request, `n` requests one after another."""
    gc.collect()
    start = cpu()
    for _ in range(n):
        await request(app, text)
    return (cpu() - start) / n * 1e6


async def kib_per_open_stream(app: Starlette, streams: int) -> float:
    """Python heap held per stream open mid-reply (tracemalloc), `streams` at once."""
    gone = asyncio.Event()
    started = asyncio.Semaphore(0)
    await request(app, "warm up")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [asyncio.ensure_future(request(app, "hold", started.release, gone)) for _ in range(streams)]
    for _ in range(streams):
        await started.acquire()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    gone.set()
    await asyncio.gather(*tasks)
    return held / streams / 1024


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[Starlette]:
    async with app.router.lifespan_context(app):
        yield app


async def app_rounds(rounds: int, requests: int, streams: int) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        name: {"request": [], "token": [], "stream": []} for name, _ in VARIANTS
    }
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            apps = {}
            for i, (name, library) in enumerate(VARIANTS):
                folder = Path(tmp) / str(i)
                folder.mkdir()
                apps[name] = await stack.enter_async_context(running(build(folder, library)))
            for name, library in VARIANTS:  # warm up every path once
                with patched(library):
                    await cpu_per_request(apps[name], "long", 5)
            for r in range(rounds):
                for name, library in VARIANTS:
                    with patched(library):
                        short = await cpu_per_request(apps[name], "hi", requests)
                        long = await cpu_per_request(apps[name], "long", max(requests // 10, 5))
                        results[name]["request"].append(short)
                        results[name]["token"].append((long - short) / (LONG_WORDS - 1))
                        if r < 2:  # memory does not move from round to round
                            results[name]["stream"].append(await kib_per_open_stream(apps[name], streams))
                print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return results


# --- 3, alone: a body frame's way down -----------------------------------------------------------

FRAMES = 20_000


class Frames:
    """A raw ASGI endpoint writing FRAMES body frames, through the middleware or around them."""

    def __init__(self, bypass: bool) -> None:
        self.bypass = bypass

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body_send = server_send(scope, send) if self.bypass else send
        await send({"type": "http.response.start", "status": 200, "headers": []})
        frame = {"type": "http.response.body", "body": b"data: x\n\n", "more_body": True}
        for _ in range(FRAMES):
            await body_send(frame)
        await body_send({"type": "http.response.body", "body": b""})


async def frame_path(rounds: int) -> tuple[list[float], list[float]]:
    """µs of CPU per body frame: around the middleware (shipped), and through them."""

    def app(bypass: bool) -> Starlette:
        return SluicegateApp(
            routes=[Route("/x", Frames(bypass))],
            middleware=[Middleware(ObserveMiddleware), Middleware(APIKeyMiddleware, api_keys=[])],
        )

    around, through = app(True), app(False)
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b""}

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        pass

    results: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for target, out in ((around, results[0]), (through, results[1])):
            start = cpu()
            await target(dict(scope), receive, send)
            out.append((cpu() - start) / FRAMES * 1e6)
    return results


# --- 1, 2 and 4 alone: per request, with nothing else in the way ---------------------------------

REQUESTS = 20_000


class Empty:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def per_request(rounds: int) -> dict[str, list[float]]:
    """µs of CPU per request through the shipped stack, and with one workaround undone (1 redone)."""
    endpoint = Empty()

    def app(cls: type[Starlette], dispatch_first: bool) -> Starlette:
        middleware = [Middleware(ObserveMiddleware), Middleware(APIKeyMiddleware, api_keys=[])]
        if dispatch_first:
            middleware.append(Middleware(TurnRoutes, turns={"/v1/chat/completions": endpoint}))
        return cls(routes=[Route("/v1/chat/completions", endpoint, methods=["POST"])], middleware=middleware)

    apps = {
        "shipped": app(SluicegateApp, True),
        "1 inlined __call__ (gone)": app(InlinedCall, True),
        "2 router for chat": app(SluicegateApp, False),
    }
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [],
        "query_string": b"",
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        pass

    results: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, target in apps.items():
            start = cpu()
            for _ in range(REQUESTS):
                await target(dict(scope), receive, send)
            results[name].append((cpu() - start) / REQUESTS * 1e6)
    return results


async def release_list(rounds: int) -> tuple[list[float], list[float], float, float]:
    """µs per owner (three releases taken, all released) and bytes per owner held: Owned, AsyncExitStack."""

    def release() -> None:
        pass

    async def arelease() -> None:
        pass

    async def cycle(kind: type[Any]) -> None:
        async with kind() as owned:
            owned.callback(release)
            owned.push_async_callback(arelease)
            owned.callback(release)

    def held(kind: type[Any]) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        owners = []
        for _ in range(1000):
            owned = kind()
            owned.callback(release)
            owned.push_async_callback(arelease)
            owned.callback(release)
            owners.append(owned)
        size = (tracemalloc.get_traced_memory()[0] - before) / 1000
        tracemalloc.stop()
        return size

    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        for kind, out in ((Owned, ours), (contextlib.AsyncExitStack, theirs)):
            start = cpu()
            for _ in range(REQUESTS):
                await cycle(kind)
            out.append((cpu() - start) / REQUESTS * 1e6)
    return ours, theirs, held(Owned), held(contextlib.AsyncExitStack)


# --- 5: JSON spliced by hand ---------------------------------------------------------------------


def json_splice(rounds: int) -> tuple[list[float], list[float]]:
    """µs per per-token frame: the encoder's splice, and orjson.dumps of the whole chunk."""
    encoder = ChatCompletionsEncoder("chatcmpl-123", 1_700_000_000, "m", include_usage=True, logprobs=False)

    async def deltas() -> list[ItemDelta]:
        async def raw() -> AsyncIterator[RawEvent]:
            for i in range(2000):
                yield TextDelta(Kind.MESSAGE, f" w{i}")

        return [e async for e in segment(raw()) if type(e) is ItemDelta]

    events = asyncio.run(deltas())

    def library(event: ItemDelta) -> bytes:
        return orjson.dumps(
            {
                "id": "chatcmpl-123",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "m",
                "service_tier": None,
                "system_fingerprint": None,
                "choices": [
                    {"index": 0, "delta": {"content": event.text}, "logprobs": None, "finish_reason": None}
                ],
                "usage": None,
            }
        )

    for event in events[:3]:
        assert encoder.encode(event)[0].data == library(event), "the two ways must write the same bytes"
    ours, theirs = [], []
    for _ in range(rounds):
        for way, out in ((lambda e: encoder.encode(e), ours), (library, theirs)):
            start = time.perf_counter()
            for _ in range(10):
                for event in events:
                    way(event)
            out.append((time.perf_counter() - start) / (10 * len(events)) * 1e6)
    return ours, theirs


# --- 6: the upstream HTTP client -----------------------------------------------------------------


def upstream_client(rounds: int) -> dict[str, list[float]]:
    """µs of CPU per relayed token reading 16 x 2,000-token streams: httpx, and HttpPool."""
    sys.path.insert(0, str(Path(__file__).parent))
    import upstream_clients as uc

    results: dict[str, list[float]] = {"httpx": [], "HttpPool": []}
    clients = {"httpx": uc.with_httpx, "HttpPool": uc.with_pool}

    async def measure(url: str) -> None:
        for _ in range(rounds):
            for name, read in clients.items():
                await read(url, 2)
                start = uc.cpu()
                await read(url, uc.STREAMS)
                results[name].append((uc.cpu() - start) / (uc.STREAMS * uc.TOKENS) * 1e6)

    with uc.fast_upstream() as url:
        uvloop.run(measure(url))
    return results


# --- the report ------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})"


def ratio(library: list[float], ours: list[float]) -> str:
    ratios = [a / b for a, b in zip(library, ours, strict=True)]
    return f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300, help="short requests per round and variant")
    parser.add_argument("--streams", type=int, default=200, help="streams held open for the memory figure")
    parser.add_argument("--skip-upstream", action="store_true", help="leave out the HTTP client pair")
    args = parser.parse_args()

    results = uvloop.run(app_rounds(args.rounds, args.requests, args.streams))
    base = results["shipped"]
    print(
        "\nThrough the app (ASGI, scripted engine), each variant one library way; ratio = variant / shipped"
    )
    print(
        f"{'variant':<26}{'µs CPU/request':>24}{'ratio':>26}{'µs CPU/token':>24}{'ratio':>26}{'KiB/stream':>12}"
    )
    for name, _ in VARIANTS:
        got = results[name]
        print(
            f"{name:<26}{spread(got['request']):>24}{ratio(got['request'], base['request']):>26}"
            f"{spread(got['token']):>24}{ratio(got['token'], base['token']):>26}"
            f"{statistics.median(got['stream']):>12.2f}"
        )

    alone = uvloop.run(per_request(args.rounds))
    print("\nOne request through the app's own layers alone (an empty endpoint), µs CPU")
    for name, got in alone.items():
        print(f"  {name:<28}{spread(got)}   ratio {ratio(got, alone['shipped'])}")

    ours, theirs, ours_bytes, theirs_bytes = uvloop.run(release_list(args.rounds))
    print("\nWhat a request holds, three releases taken and all released: Owned vs AsyncExitStack")
    print(
        f"  Owned {spread(ours)} µs, {ours_bytes:.0f} B held   AsyncExitStack {spread(theirs)} µs, "
        f"{theirs_bytes:.0f} B held   ratio {ratio(theirs, ours)}"
    )

    around, through = uvloop.run(frame_path(args.rounds))
    print("\nA stream body frame's way down, µs CPU per frame (the observe and auth middleware)")
    print(f"  around them {spread(around)}   through them {spread(through)}   ratio {ratio(through, around)}")

    ours, theirs = json_splice(args.rounds)
    print("\nPer-token Chat Completions frame, µs (byte-identical output)")
    print(
        f"  spliced {spread(ours)}   orjson.dumps of the chunk {spread(theirs)}   ratio {ratio(theirs, ours)}"
    )

    if not args.skip_upstream:
        clients = upstream_client(args.rounds)
        print("\nUpstream relay, µs CPU per token (16 x 2,000-token streams)")
        print(
            f"  HttpPool {spread(clients['HttpPool'])}   httpx {spread(clients['httpx'])}"
            f"   ratio {ratio(clients['httpx'], clients['HttpPool'])}"
        )


if __name__ == "__main__":
    main()
