"""The floor under any Python relay: a TCP splice on uvloop, for `bench/gateway.py --targets py-floor`.

Every client connection gets its own connection to the upstream, and bytes go across as they
arrive: one `data_received`, one `transport.write`, nothing parsed, nothing framed. No HTTP
relay written in Python can do less per upstream read (it has at least this read and this
write, and the event loop's wake-up between them), so its CPU per token, against nginx's in the
same run, says how near to nginx any Python gateway can come before it does a relay's work:
parsing the upstream's HTTP and SSE, reading the chunk's JSON, framing the client's stream.

    python bench/relay_floor.py --listen PORT --upstream PORT
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

import uvloop


class _Side(asyncio.Protocol):
    """One end of a splice: what it reads goes to `peer`; it stops reading while the peer's
    write buffer is full (the peer's `pause_writing`), so memory stays bounded."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # read before the peer was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
        else:
            peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Client(_Side):
    def __init__(self, upstream: int) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        try:
            _, server = await asyncio.get_running_loop().create_connection(_Side, "127.0.0.1", self.upstream)
        except OSError:
            self.transport.close()
            return
        server.peer, self.peer = self, server
        assert server.transport is not None
        for data in self.pending:
            server.transport.write(data)
        self.pending.clear()


async def _serve(make: Callable[[int], asyncio.Protocol], listen: int, upstream: int) -> None:
    server = await asyncio.get_running_loop().create_server(
        lambda: make(upstream), "127.0.0.1", listen, backlog=4096
    )
    async with server:
        await server.serve_forever()


def run(make: Callable[[int], asyncio.Protocol], doc: str) -> None:
    """A reference relay's command line: `make(upstream port)` is a client connection's protocol."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(_serve(make, args.listen, args.upstream))


if __name__ == "__main__":
    run(_Client, __doc__)
