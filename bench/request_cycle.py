"""Instructions per request in the server's protocol and the app's layers, the part of a request
start before the turn runner: callgrind, in process, a count the machine's load does not move.

    python bench/request_cycle.py [--baseline /work/main/src] [--requests 2000]

Each variant is a process of its own under `valgrind --tool=callgrind`, counting only the
`--requests` keep-alive requests it pushes through an in-memory transport (not the imports and
the warm-up: `--toggle-collect` on the one C function that runs the counted loop). The request
is the bench's (`load_client.py`'s head, a one-message streamed Chat Completions body):

- `harness`: the loop alone (a protocol that answers nothing): what the others include;
- `protocol`: our uvicorn protocol and request cycle (`app/http_protocol.py`) running an ASGI
  app that does what the turn runner does at the HTTP boundary, and no more: reads the body,
  parses it, sends a stream's head (the SSE headers and an `X-Request-ID`), one chunk through
  the server's sink, the end;
- `app`: the same endpoint under the app's layers (`create_app`'s app: `SluicegateApp`, the
  observer, CORS, auth, the chat dispatch), put in place of the chat route's turn runner.

`app` - `protocol` is what the app's layers cost, `protocol` - `harness` the server's protocol
and cycle (parsing, scope, task, head, chunk, end, keep-alive). With `--baseline`, the same
three in another tree (PYTHONPATH), e.g. main's, for a before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
BODY = json.dumps(
    {
        "model": "scripted-demo",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1,
    }
).encode()
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
    b"Accept: text/event-stream\r\nAuthorization: Bearer bench\r\nContent-Length: %d\r\n\r\n%b"
) % (len(BODY), BODY)
HEAD = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
WARM_UP = 200
TOGGLE = "functools_reduce"  # counted: what runs inside the one `functools.reduce` call


class Wire(asyncio.Transport):
    """The connection's socket: counts what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.closing = False

    def write(self, data: Any) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Endpoint:
    """What the turn runner does at the HTTP boundary, and nothing else."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.ids = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        orjson.loads(body)
        self.ids += 1
        headers = [*HEAD, (b"x-request-id", b"chatcmpl-%d" % self.ids)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        writer = scope["sluicegate.body_writer"]  # transport.stream.BODY_WRITER
        writer.write(b'data: {"choices":[]}\n\n')
        await writer.end(True)
        assert self.done is not None
        self.done.set_result(None)


class Nothing(asyncio.Protocol):
    """`harness`: the loop's own cost; a request is done when it arrives."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def data_received(self, data: bytes) -> None:
        assert self.endpoint.done is not None
        self.endpoint.done.set_result(None)


def protocol(variant: str, endpoint: Endpoint) -> asyncio.Protocol:
    if variant == "harness":
        return Nothing(endpoint)
    import uvicorn
    from uvicorn.server import ServerState

    from sluicegate.app.http_protocol import JSONHttpToolsProtocol

    app: Any = endpoint
    if variant == "app":
        from sluicegate.app.factory import create_app
        from sluicegate.config import Settings

        folder = tempfile.mkdtemp(prefix="request-cycle-")
        app = create_app(Settings(data_dir=Path(folder)))  # as the benches serve: no keys
        layer = app.build_middleware_stack()
        app.middleware_stack = layer
        while not hasattr(layer, "turns"):  # down to the chat dispatch (TurnRoutes)
            layer = layer.app
        layer.turns["/v1/chat/completions"] = endpoint
    config = uvicorn.Config(app, log_level="error", proxy_headers=False, lifespan="off")
    config.load()
    server = ServerState()  # uvicorn's own headers, as its server sets them (the date: once a second)
    server.default_headers = [(b"date", b"Sun, 29 Nov 2026 12:00:00 GMT"), (b"server", b"uvicorn")]
    proto = JSONHttpToolsProtocol(config=config, server_state=server, app_state={}, header_timeout=10)
    proto.connection_made(Wire())
    return proto


async def requests(proto: asyncio.Protocol, endpoint: Endpoint, n: int) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        endpoint.done = loop.create_future()
        proto.data_received(REQUEST)
        await endpoint.done
        await asyncio.sleep(0)  # the request's task ends (its done callbacks run)


def child(variant: str, n: int) -> None:
    """In the process callgrind runs: warm up, then the counted loop inside `functools.reduce`."""
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    endpoint = Endpoint()
    proto = protocol(variant, endpoint)
    loop.run_until_complete(requests(proto, endpoint, WARM_UP))
    functools.reduce(lambda _a, _b: loop.run_until_complete(requests(proto, endpoint, n)), [0, 0])


def count(variant: str, n: int, pythonpath: str | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={TOGGLE}",
                f"--callgrind-out-file={out}", sys.executable, str(Path(__file__).resolve()),
                "--child", variant, "--requests", str(n),
            ],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError("no totals in callgrind's output")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="also the tree whose src/ this is (PYTHONPATH)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests)
        return
    trees: dict[str, str | None] = {"this": None}
    if args.baseline:
        trees["baseline"] = args.baseline
    results: dict[str, dict[str, float]] = {}
    for label, path in trees.items():
        results[label] = {
            v: count(v, args.requests, path) / args.requests for v in ("harness", "protocol", "app")
        }
        r = results[label]
        print(
            f"{label:9} instructions per request: harness {r['harness'] / 1e3:6.1f} k, "
            f"protocol and cycle {(r['protocol'] - r['harness']) / 1e3:6.1f} k, "
            f"app layers {(r['app'] - r['protocol']) / 1e3:6.1f} k, total {r['app'] / 1e3:6.1f} k",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
