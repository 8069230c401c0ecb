"""The gateway benchmark's load generator: streams requests and times them like vLLM's serving
benchmark, at a fraction of its client cost. `bench/gateway.py` runs it in its own process.

It is a raw asyncio protocol (uvloop when installed) with httptools decoding HTTP/1.1, one
keep-alive connection per concurrent worker. Each read is timestamped once; the decoded body is
split into SSE frames, and a frame is *content-bearing* when it holds a non-empty text delta
(`"content":"…"` for Chat Completions, a `response.output_text.delta` event for Responses): no
JSON parsing, two substring tests per frame. Like vLLM's benchmark:

- TTFT: request written → first content-bearing frame received;
- ITL: gap between consecutive content-bearing frames (frames that arrive in one read get 0);
- end-to-end: request written → response complete.

Modes (JSON on stdout):
  run   --concurrency C --requests N: N requests, C at a time; timings and tokens/s.
  hold  --requests N: open N streams at once; print READY when every one has its first
        content-bearing frame, then hold them until a line arrives on stdin, then close them.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time

import httptools
import orjson

MARKS = {
    # (a frame is content-bearing when it holds `mark` and not `empty`)
    "chat": (b'"content":"', b'"content":""'),
    "completions": (b'"text":"', b'"text":""'),
    "responses": (b"response.output_text.delta", None),
    "lmstudio": (b"event: message.delta", None),
    "ollama": (b'"content":"', b'"content":""'),  # NDJSON: the last line's content is ""
}
# How frames are separated: SSE's blank line, or NDJSON's newline.
SEPARATORS = {"ollama": b"\n"}


class Stream:
    """One response's timings."""

    __slots__ = ("e2e", "error", "first", "itl", "last", "sent", "status", "tokens")

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.first = 0.0
        self.last = 0.0
        self.e2e = 0.0
        self.tokens = 0
        self.itl: list[float] = []
        self.status = 0
        self.error = ""


class Connection(asyncio.Protocol):
    def __init__(self, mark: bytes, empty: bytes | None, keep_itl: bool, separator: bytes = b"\n\n") -> None:
        self.separator = separator
        self.mark = mark
        self.empty = empty
        self.keep_itl = keep_itl
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.stream: Stream | None = None
        self.done: asyncio.Future[Stream] | None = None
        self.first_seen: asyncio.Future[None] | None = None
        self.buffer = b""
        self.now = 0.0
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.done is not None and not self.done.done():
            assert self.stream is not None
            self.stream.error = self.stream.error or f"connection lost: {exc}"
            self.done.set_result(self.stream)

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            assert self.transport is not None and self.stream is not None and self.done is not None
            self.stream.error = f"bad HTTP from the server: {exc}"
            self.transport.close()

    def on_status(self, status: bytes) -> None:
        assert self.stream is not None
        self.stream.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        stream = self.stream
        assert stream is not None
        if stream.status != 200:
            stream.error += body.decode(errors="replace")[:500]
            return
        frames = (self.buffer + body).split(self.separator)
        self.buffer = frames.pop()
        mark, empty, now = self.mark, self.empty, self.now
        for frame in frames:
            if mark in frame and (empty is None or empty not in frame):
                if stream.tokens == 0:
                    stream.first = now
                    if self.first_seen is not None and not self.first_seen.done():
                        self.first_seen.set_result(None)
                elif self.keep_itl:
                    stream.itl.append(now - stream.last)
                stream.last = now
                stream.tokens += 1

    def on_message_complete(self) -> None:
        stream = self.stream
        assert stream is not None and self.done is not None
        stream.e2e = time.perf_counter() - stream.sent
        if stream.status != 200 and not stream.error:
            stream.error = f"HTTP {stream.status}"
        self.buffer = b""
        if not self.done.done():
            self.done.set_result(stream)

    def send(self, request: bytes) -> asyncio.Future[Stream]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.done = loop.create_future()
        self.first_seen = loop.create_future()
        self.stream = Stream(time.perf_counter())
        self.transport.write(request)
        return self.done


def build_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAuthorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def connect(args: argparse.Namespace, keep_itl: bool) -> Connection:
    mark, empty = MARKS[args.dialect]
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(
        lambda: Connection(mark, empty, keep_itl, SEPARATORS.get(args.dialect, b"\n\n")), args.host, args.port
    )
    return protocol


def summary(stream: Stream) -> dict[str, object]:
    return {
        "ttft": stream.first - stream.sent if stream.tokens else None,
        "e2e": stream.e2e,
        "tokens": stream.tokens,
        "itl": stream.itl,
        "error": stream.error,
    }


async def run(args: argparse.Namespace, request: bytes) -> dict[str, object]:
    """`requests` requests, or (with --duration) as many as fit; `concurrency` at a time."""
    results: list[Stream] = []
    todo = iter(range(args.requests)) if not args.duration else iter(int, 1)  # endless
    conns = [await connect(args, keep_itl=not args.duration) for _ in range(args.concurrency)]
    loop = asyncio.get_running_loop()
    # Start on a word from the caller, so it can read every process's CPU time over the same window.
    print("CONNECTED", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    stopped = False
    received_at_stop = 0

    def stop() -> None:
        nonlocal stopped, received_at_stop
        stopped = True
        received_at_stop = sum(s.tokens for s in results)
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()

    async def worker(i: int) -> None:
        conn = conns[i]
        for _ in todo:
            if stopped:
                return
            if conn.transport is None or conn.transport.is_closing() or conn.lost.done():
                conn = conns[i] = await connect(args, keep_itl=not args.duration)
            stream = conn.send(request)
            results.append(conn.stream)  # type: ignore[arg-type]
            await stream
        if conn.transport is not None:
            conn.transport.close()

    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    if args.duration:
        loop.call_later(args.duration, stop)
    await asyncio.gather(*(worker(i) for i in range(args.concurrency)))
    wall = args.duration or time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    finished = [s for s in results if s.e2e and not s.error] if args.duration else results
    return {
        "wall": wall,
        "received": received_at_stop if args.duration else sum(s.tokens for s in results),
        "client_cpu": (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime),
        "streams": [summary(s) for s in finished],
    }


async def hold(args: argparse.Namespace, request: bytes) -> dict[str, object]:
    """Open `requests` streams at once, report when all are flowing, close them on request."""
    conns: list[Connection] = []
    for i in range(0, args.requests, 100):  # connect in batches: no SYN storm against the backlog
        conns += await asyncio.gather(
            *(connect(args, keep_itl=False) for _ in range(min(100, args.requests - i)))
        )
    dones = [conn.send(request) for conn in conns]
    firsts = [conn.first_seen for conn in conns]
    assert all(f is not None for f in firsts)
    waiting = asyncio.gather(*firsts)  # type: ignore[arg-type]
    finished = asyncio.ensure_future(asyncio.wait(dones, return_when=asyncio.FIRST_COMPLETED))
    await asyncio.wait({waiting, finished}, return_when=asyncio.FIRST_COMPLETED, timeout=args.timeout)
    flowing = sum(1 for f in firsts if f is not None and f.done())
    errors = [d.result().error for d in dones if d.done() and d.result().error]
    print(f"READY {flowing}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    finished.cancel()
    return {"flowing": flowing, "errors": errors[:5]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["run", "hold"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--body", required=True, help="the JSON request body")
    parser.add_argument("--dialect", choices=sorted(MARKS), default="chat")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1)
    parser.add_argument("--duration", type=float, default=0.0, help="run: stop after this many seconds")
    parser.add_argument("--timeout", type=float, default=60.0, help="hold: wait this long for first frames")
    parser.add_argument("--out", help="write the JSON result to this file, and only `DONE` to stdout")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    request = build_request(args.host, args.port, args.path, args.body.encode())
    mode = run if args.mode == "run" else hold
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(mode(args, request))
    else:
        result = uvloop.run(mode(args, request))
    if args.out:  # a result can be megabytes of ITLs: a file, not a pipe
        with open(args.out, "wb") as f:
            f.write(orjson.dumps(result))
        sys.stdout.write("DONE\n")
        return
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
