"""A fake OpenAI-compatible upstream that streams Chat Completions (and legacy text
completions, `/v1/completions`) as fast as a socket allows.

Run: `python bench/fast_upstream.py --port 9000 [--delay-ms 0] [--tokens 256]`

It is a raw asyncio protocol (on uvloop when installed) with httptools parsing requests: no
framework, no per-token JSON encoding. Every token frame is precomputed bytes, written with
one `transport.write` per token as vLLM writes one chunk per token, then it yields to the loop
(or sleeps the inter-token delay). The wire format is vLLM's: a first chunk with
`{"role":"assistant","content":""}`, one chunk per token, a finish chunk with
`finish_reason` `length`, a `choices: []` usage chunk when `stream_options.include_usage` is
set, then `data: [DONE]`; HTTP/1.1 keep-alive with chunked transfer encoding. A text completion
is the same without the role chunk, `text_completion` chunks with `"text"` in vLLM's shape.

Per request:
- the token count is `max_tokens` (or `max_completion_tokens`), else `--tokens`;
- the inter-token delay is taken from a model name ending in `-d<ms>` (`fake-d5` → 5 ms), so a
  gateway that maps its own model ids to upstream names needs no extra field; other names use
  `--delay-ms`. The first token is sent at once (no simulated prefill).

`GET /v1/models` lists `fake`; `GET /health` answers 200. Writes respect the transport's flow
control, so a slow reader does not make this process buffer without bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import resource
import signal
import time

import httptools
import orjson

WORDS = [" sluice", " gate", " water", " stream", " token", " river", " lock", " flow", " canal", " weir"]
DELAY_IN_NAME = re.compile(r"-d(\d+(?:\.\d+)?)$")


def _chunk(payload: bytes) -> bytes:
    """One SSE frame, as one HTTP/1.1 chunk."""
    frame = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(frame), frame)


class Frames:
    """Every byte this server streams for one model name, built once."""

    def __init__(self, model: str, max_tokens: int) -> None:
        head = orjson.dumps(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
            }
        )[:-1]
        self.role = _chunk(
            head + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]}'
        )
        self.tokens = [
            _chunk(
                head
                + b',"choices":[{"index":0,"delta":{"content":'
                + orjson.dumps(WORDS[i % len(WORDS)])
                + b'},"logprobs":null,"finish_reason":null}]}'
            )
            for i in range(max_tokens)
        ]
        self.finish = _chunk(
            head + b',"choices":[{"index":0,"delta":{"content":""},"logprobs":null,'
            b'"finish_reason":"length","stop_reason":null}]}'
        )
        self.head = head
        self.done = _chunk(b"[DONE]") + b"0\r\n\r\n"

    def usage(self, completion_tokens: int) -> bytes:
        usage = {
            "prompt_tokens": 8,
            "completion_tokens": completion_tokens,
            "total_tokens": 8 + completion_tokens,
        }
        return _chunk(self.head + b',"choices":[],"usage":' + orjson.dumps(usage) + b"}")


class TextFrames(Frames):
    """`/v1/completions`: the same stream as `text_completion` chunks (vLLM's shape)."""

    def __init__(self, model: str, max_tokens: int) -> None:
        head = orjson.dumps(
            {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": model}
        )[:-1]
        self.role = b""
        self.tokens = [
            _chunk(
                head
                + b',"choices":[{"index":0,"text":'
                + orjson.dumps(WORDS[i % len(WORDS)])
                + b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}'
            )
            for i in range(max_tokens)
        ]
        self.finish = _chunk(
            head
            + b',"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}]}'
        )
        self.head = head
        self.done = _chunk(b"[DONE]") + b"0\r\n\r\n"


class Upstream:
    def __init__(self, default_tokens: int, default_delay: float) -> None:
        self.default_tokens = default_tokens
        self.default_delay = default_delay
        self.frames: dict[tuple[str, bool], Frames] = {}
        self.open_streams = 0

    def frames_for(self, model: str, tokens: int, text: bool = False) -> Frames:
        frames = self.frames.get((model, text))
        if frames is None or len(frames.tokens) < tokens:
            kind = TextFrames if text else Frames
            frames = self.frames[(model, text)] = kind(model, max(tokens, self.default_tokens))
        return frames

    def delay_for(self, model: str) -> float:
        match = DELAY_IN_NAME.search(model)
        return float(match.group(1)) / 1000 if match else self.default_delay


STREAM_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _plain(status: bytes, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: %d\r\n\r\n" % len(body)
        + body
    )


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests are answered one after another."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.pending: list[tuple[bytes, bytes, bytes]] = []  # (method, url, body) not yet answered
        self.busy = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.task: asyncio.Task[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(_plain(b"400 Bad Request", b'{"error":"bad request"}'))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        self.pending.append((method, self.url, b"".join(self.body)))
        self.url = b""
        self.body = []
        if not self.busy:
            self.busy = True
            self.task = asyncio.get_running_loop().create_task(self.serve())

    async def serve(self) -> None:
        try:
            while self.pending:
                method, url, body = self.pending.pop(0)
                await self.answer(method, url, body)
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            self.busy = False

    async def answer(self, method: bytes, url: bytes, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        path = url.split(b"?", 1)[0]
        if method == b"GET" and path in (b"/health", b"/v1/models", b"/models"):
            listing = {
                "object": "list",
                "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "bench"}],
            }
            transport.write(_plain(b"200 OK", orjson.dumps(listing) if path != b"/health" else b"{}"))
            return
        text = path.endswith(b"/v1/completions")
        if method != b"POST" or not (text or path.endswith(b"/chat/completions")):
            transport.write(_plain(b"404 Not Found", b'{"error":{"message":"not found"}}'))
            return
        request = orjson.loads(body)
        model = str(request.get("model", "fake"))
        tokens = int(
            request.get("max_tokens") or request.get("max_completion_tokens") or self.upstream.default_tokens
        )
        delay = self.upstream.delay_for(model)
        frames = self.upstream.frames_for(model, tokens, text)
        if not request.get("stream"):
            text = "".join(WORDS[i % len(WORDS)] for i in range(tokens))
            transport.write(_plain(b"200 OK", orjson.dumps(_completion(model, text, tokens))))
            return
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        await self.stream(transport, frames, tokens, delay, include_usage)

    async def stream(
        self, transport: asyncio.Transport, frames: Frames, tokens: int, delay: float, include_usage: bool
    ) -> None:
        self.upstream.open_streams += 1
        try:
            transport.write(STREAM_HEADERS + frames.role)
            writable = self.writable
            sleep = asyncio.sleep
            for frame in frames.tokens[:tokens]:
                if transport.is_closing():
                    return
                transport.write(frame)
                if not writable.is_set():
                    await writable.wait()
                await sleep(delay)
            tail = frames.finish + (frames.usage(tokens) if include_usage else b"") + frames.done
            transport.write(tail)
        finally:
            self.upstream.open_streams -= 1


def _completion(model: str, text: str, tokens: int) -> dict[str, object]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens},
    }


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


async def amain(args: argparse.Namespace) -> None:
    upstream = Upstream(args.tokens, args.delay_ms / 1000)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(upstream), args.host, args.port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fast upstream on http://{args.host}:{args.port}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per reply without max_tokens")
    parser.add_argument(
        "--delay-ms", type=float, default=0.0, help="inter-token delay without -d<ms> in the model"
    )
    args = parser.parse_args()
    raise_fd_limit()
    try:
        import uvloop
    except ImportError:
        asyncio.run(amain(args))
    else:
        uvloop.run(amain(args))


if __name__ == "__main__":
    main()
