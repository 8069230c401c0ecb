"""The upstream engine's HTTP client against a real loopback socket server that answers with
scripted bytes: keep-alive reuse, chunked and EOF-delimited bodies, a stale kept-alive
connection, refused and broken connections, closing mid-body closing the connection, and TLS."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sluicegate.engines.upstream import http
from sluicegate.engines.upstream.http import ConnectFailed, HttpPool

Answer = Callable[[bytes], list[bytes] | None]  # request bytes → pieces to write (None: close)


class ScriptedServer:
    """Accepts connections; answers each request with `answer(request)`, piece by piece."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # a connection was closed by the client
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                pieces = self.answer(request)
                if pieces is None:
                    writer.close()
                    return
                for piece in pieces:
                    if piece == b"<wait>":
                        await reader.read(1)  # until the client closes
                        self.closed.set()
                        return
                    if piece == b"<close>":
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def chunked(*frames: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return [head, *(b"%x\r\n%s\r\n" % (len(f), f) for f in frames), b"0\r\n\r\n"]


async def body(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


async def test_a_chunked_stream_is_read_whole_and_the_connection_kept_alive() -> None:
    server = ScriptedServer(lambda _: chunked(b"data: 1\n\n", b"data: 2\n\n"))
    async with server as url:
        pool = HttpPool(url, {"Authorization": "Bearer k"}, connect_timeout=5)
        for _ in range(3):
            response = await pool.post_stream("/chat/completions", b'{"a":1}')
            assert response.status == 200
            assert await body(response.chunks()) == b"data: 1\n\ndata: 2\n\n"
            await response.aclose()
        await pool.aclose()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Authorization: Bearer k\r\n" in first and first.endswith(b'\r\n\r\n{"a":1}')


async def test_a_body_without_length_ends_with_the_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    server = ScriptedServer(lambda _: [head, b"data: 1\n\n", b"data: [DONE]\n\n", b"<close>"])
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        response = await pool.post_stream("/chat/completions", b"{}")
        assert await body(response.chunks()) == b"data: 1\n\ndata: [DONE]\n\n"
        await response.aclose()
        await pool.aclose()


async def test_a_connection_broken_mid_body_raises_while_reading() -> None:
    server = ScriptedServer(lambda _: [*chunked(b"data: 1\n\n")[:2], b"<close>"])
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        response = await pool.post_stream("/chat/completions", b"{}")
        with pytest.raises(Exception, match="mid-body"):
            await body(response.chunks())
        await response.aclose()


async def test_closing_before_the_end_closes_the_connection_at_once() -> None:
    server = ScriptedServer(lambda _: [*chunked(b"data: 1\n\n")[:2], b"<wait>"])
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        response = await pool.post_stream("/chat/completions", b"{}")
        assert await anext(response.chunks()) == b"data: 1\n\n"
        await response.aclose()
        await asyncio.wait_for(server.closed.wait(), 2)


async def test_a_kept_alive_connection_closed_by_the_upstream_is_replaced() -> None:
    answers = iter([chunked(b"x"), None, chunked(b"y")])  # the 2nd request finds it closed
    server = ScriptedServer(lambda _: next(answers))
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        first = await pool.post_stream("/chat/completions", b"{}")
        assert await body(first.chunks()) == b"x"
        await first.aclose()
        second = await pool.post_stream("/chat/completions", b"{}")
        assert await body(second.chunks()) == b"y"
        await second.aclose()
        await pool.aclose()
    assert server.connections == 2


async def test_an_error_status_and_its_body() -> None:
    answer = b'{"error":{"message":"no such model"}}'
    head = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(
        answer
    )
    server = ScriptedServer(lambda _: [head, answer])
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        response = await pool.post_stream("/chat/completions", b"{}")
        assert response.status == 404
        assert await response.error_body() == answer
        await response.aclose()
        status, got = await pool.get("/models", timeout=5)
        assert (status, got) == (404, answer)
        await pool.aclose()
    assert server.connections == 1


async def test_a_refused_connection_is_connect_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = HttpPool(f"http://127.0.0.1:{port}/v1", {}, connect_timeout=5)
    with pytest.raises(ConnectFailed) as caught:
        await pool.post_stream("/chat/completions", b"{}")
    assert not caught.value.timed_out


async def test_an_upstream_that_never_answers_a_get_times_out() -> None:
    server = ScriptedServer(lambda _: [b"<wait>"])
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        with pytest.raises(ConnectFailed) as caught:
            await pool.get("/health", timeout=0.2)
        assert caught.value.timed_out
        await asyncio.wait_for(server.closed.wait(), 2)


async def test_a_slow_reader_pauses_the_socket_and_still_gets_everything() -> None:
    frames = [b"data: %06d\n\n" % i for i in range(40_000)]  # ~560 KB, over the high-water mark
    server = ScriptedServer(lambda _: chunked(*frames))
    async with server as url:
        pool = HttpPool(url, {}, connect_timeout=5)
        response = await pool.post_stream("/chat/completions", b"{}")
        connection = response._conn
        async with asyncio.timeout(10):  # the upstream writes ahead until the reader pauses
            while connection._reading:
                await asyncio.sleep(0.005)
        assert await body(response.chunks()) == b"".join(frames)
        await response.aclose()
        await pool.aclose()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


async def test_an_https_upstream_is_verified_and_streamed(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    server = ScriptedServer(lambda _: chunked(b"data: 1\n\n"))
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_side)
    url = f"https://127.0.0.1:{server.server.sockets[0].getsockname()[1]}/v1"
    try:
        # Not trusted by default: refused before anything is sent.
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await HttpPool(url, {}, connect_timeout=5).post_stream("/chat/completions", b"{}")
        trusting = ssl.create_default_context(cafile=str(cert))
        pool = HttpPool(url, {}, connect_timeout=5, tls=trusting)
        response = await pool.post_stream("/chat/completions", b"{}")
        assert await body(response.chunks()) == b"data: 1\n\n"
        await response.aclose()
        await pool.aclose()
    finally:
        server.server.close()
    assert b"Host: 127.0.0.1:" in server.requests[-1]


class _Transport:
    """Enough of a transport for `_Connection` alone: what it writes, whether it closed."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


async def test_a_body_nobody_reads_stops_the_socket_being_read_past_the_high_water_mark() -> None:
    """The slow reader's bound on the upstream side: body bytes that wait unread past
    `HIGH_WATER` pause the socket (TCP flow control reaches the upstream); a read resumes it."""
    conn = http._Connection()
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    head = conn.start(b"POST / HTTP/1.1\r\n\r\n")
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert await head == 200
    piece = b"x" * 4096
    sent = 0
    while not transport.paused:
        assert sent <= http.HIGH_WATER + len(piece)
        conn.data_received(b"%x\r\n%b\r\n" % (len(piece), piece))
        sent += len(piece)
    assert sent > http.HIGH_WATER - len(piece)
    assert len(await conn.read() or b"") == sent
    assert not transport.paused
    conn.done()  # (the exchange is over: the start its answer woke is settled)


async def test_what_arrived_before_a_broken_connection_is_read_first() -> None:
    """The last bytes and the connection's end in one turn of the loop, while the engine waits:
    it reads the bytes, then learns the body broke (not the error alone, the bytes lost)."""
    conn = http._Connection()
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    head = conn.start(b"POST / HTTP/1.1\r\n\r\n")
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert await head == 200
    waiting = asyncio.ensure_future(conn.read())
    await asyncio.sleep(0)  # one turn of the loop: the read is waiting now
    assert conn._wake is not None and not waiting.done()
    conn.data_received(b"5\r\nhello\r\n")
    conn.connection_lost(None)
    assert await waiting == b"hello"
    with pytest.raises(http.BodyBroken):
        await conn.read()


async def test_a_connection_keeps_fields_not_an_instance_dict() -> None:
    """One lives as long as its stream (bench/README.md, gateway "Round fifteen")."""
    assert not hasattr(http._Connection(), "__dict__")
