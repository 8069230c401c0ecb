"""transport/stream.py's response head: a stream's own headers override the transport's fixed
ones whatever their case, and their names are encoded once (a bounded table)."""

from __future__ import annotations

from unittest import mock

from sluicegate.transport import stream
from sluicegate.transport.stream import raw_headers


def test_own_headers_override_the_fixed_ones_in_any_case() -> None:
    base = raw_headers({"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    head = stream._head(base, {"cache-CONTROL": "no-store", "X-Request-ID": "chatcmpl-1"})
    assert head == [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-store"),
        (b"x-request-id", b"chatcmpl-1"),
    ]
    assert stream._head(base, None) == base and stream._head(base, None) is not base


def test_header_names_are_encoded_once_in_a_bounded_table() -> None:
    with mock.patch.dict(stream._names, clear=True):
        for n in range(stream._MAX_NAMES + 10):
            assert stream._head([], {f"X-Custom-{n}": "v"}) == [(f"x-custom-{n}".encode(), b"v")]
        assert len(stream._names) == stream._MAX_NAMES
        first = stream._head([], {"X-Custom-0": "a"})[0][0]
        assert first is stream._head([], {"X-Custom-0": "b"})[0][0]
