"""A lean Python relay doing a relay's work, for `bench/gateway.py --targets py-lean`.

Between `relay_floor.py` (bytes across, nothing read) and Sluicegate: the least work a gateway
that translates does per upstream read, written as one asyncio protocol on uvloop with no
framework and no task per token. The client's request is parsed (httptools) and its JSON read
and written again for the upstream; every upstream read is parsed as HTTP (chunked, httptools),
split into SSE events, each event's JSON is read (orjson), a new Chat Completions chunk is
built from its delta and written again, and what the read held goes to the client as one HTTP
chunk, in the same callback that received it. Its CPU per token against nginx's says how close
a Python gateway doing this work can come; the rest of Sluicegate's is its architecture (the
tasks, generators and layers between the socket and the encoder).

    python bench/relay_lean.py --listen PORT --upstream PORT
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
import orjson

from relay_floor import run

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
HEALTH = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class _Upstream(asyncio.Protocol):
    """The upstream connection of one client connection: its answers go to `client`."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.pending = b""  # an SSE event not yet ended by its blank line
        self.out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)
        if self.out:
            body = b"".join(self.out)
            self.out.clear()
            self.client.write(b"%x\r\n%s\r\n" % (len(body), body))

    def on_headers_complete(self) -> None:
        self.client.write(HEAD)

    def on_body(self, body: bytes) -> None:
        events = (self.pending + body).split(b"\n\n")
        self.pending = events.pop()
        out = self.out
        for event in events:
            data = event[6:] if event.startswith(b"data: ") else b""
            if not data:
                continue
            if data == b"[DONE]":
                out.append(b"data: [DONE]\n\n")
                continue
            chunk: dict[str, Any] = orjson.loads(data)
            choices = [
                {
                    "index": c["index"],
                    "delta": c.get("delta", {}),
                    "logprobs": None,
                    "finish_reason": c.get("finish_reason"),
                }
                for c in chunk.get("choices", ())
            ]
            relayed = {
                "id": chunk["id"],
                "object": "chat.completion.chunk",
                "created": chunk["created"],
                "model": chunk["model"],
                "choices": choices,
            }
            if chunk.get("usage"):
                relayed["usage"] = chunk["usage"]
            out += (b"data: ", orjson.dumps(relayed), b"\n\n")

    def on_message_complete(self) -> None:
        self.parser = httptools.HttpResponseParser(self)  # ready for the connection's next answer
        if self.out:  # the read's last events go before the body's end
            body = b"".join(self.out)
            self.out.clear()
            self.client.write(b"%x\r\n%s\r\n" % (len(body), body))
        self.client.write(b"0\r\n\r\n")

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.resume_reading()


class _Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.upstream: _Upstream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pause_writing(self) -> None:  # the client reads slowly: stop reading the upstream
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        if not body:
            self.write(HEALTH)
            return
        request = orjson.loads(body)
        request["stream"] = True
        payload = orjson.dumps(request)
        head = (
            b"POST " + url + b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(payload)
        )
        asyncio.get_running_loop().create_task(self._send(head + payload))

    async def _send(self, request: bytes) -> None:
        if self.upstream is None or self.upstream.transport is None or self.upstream.transport.is_closing():
            _, self.upstream = await asyncio.get_running_loop().create_connection(
                lambda: _Upstream(self), "127.0.0.1", self.upstream_port
            )
        assert self.upstream.transport is not None
        self.upstream.transport.write(request)


if __name__ == "__main__":
    run(_Client, __doc__)
