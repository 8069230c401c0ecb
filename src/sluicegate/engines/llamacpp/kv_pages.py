"""A new context's KV cache holds no memory until sequences reach its cells.

llama.cpp clears a context's KV cache when it makes it (`ggml_backend_buffer_clear(buf, 0)`:
no NaN in cells no sequence has written), and writing zeros to every byte makes every page of
it resident: the demo GGUF's 8 x 2,560 cells hold 640 MiB from the start, whatever is served
(bench/README.md, "Memory, round six"). A page of zeros can be handed back to the kernel with
`madvise(MADV_DONTNEED)`: an anonymous private page read after that reads as zeros again, so
llama.cpp sees the same bytes, and a page comes back only when a sequence writes into it.

Where the cache is: the context's buffers are glibc `mmap`s (each far above its mmap
threshold; the kernel merges neighbours into one mapping) that appear while
`llama_init_from_model` runs. Of the address ranges mapped in that call (a mapping the kernel
merged with an older neighbour is cut to its new part), a chunk is released when every page of it
is resident (`mincore`: written, as the clear writes the cache; the compute and output buffers
are reserved, not written) and it reads as zeros. Context creations and model loads take one
lock (`exclusive`), so no other context's or model's new buffer is being written in the window.
Linux only; elsewhere nothing is released.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

LARGE: Final = 16 << 20  # a llama.cpp buffer (the same threshold as bench/batching.py's by source)
CHUNK: Final = 1 << 20  # released in 1 MiB steps: the chunk's check costs less than its bytes
_MADV_DONTNEED: Final = 4
_LOW_BIT: Final = bytes(flag & 1 for flag in range(256))  # mincore's "resident"; the rest reserved
_LOCK = threading.Lock()

Span = tuple[int, int]


def anonymous_spans(maps: str) -> set[Span]:
    """The writable anonymous mappings of at least LARGE bytes in a /proc/PID/maps text."""
    spans = set()
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) != 5 or fields[4] != "0" or not fields[1].startswith("rw"):
            continue  # a file, a named region ([heap], [stack]) or not writable
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if end - start >= LARGE:
            spans.add((start, end))
    return spans


def mapped(maps: str) -> list[Span]:
    """Every mapping's span in a /proc/PID/maps text, in address order."""
    return [
        (int(start, 16), int(end, 16))
        for start, end in (line.split(maxsplit=1)[0].split("-") for line in maps.splitlines() if line)
    ]


def new_spans(before: str, after: str) -> list[Span]:
    """The address ranges of `after`'s large anonymous mappings that nothing mapped in `before`:
    the kernel merges a new mapping with a neighbour of the same kind, so a mapping that grew
    (another context's cache, a buffer another thread is writing) is cut down to its new part,
    and only bytes that did not exist before the context's making are ever released."""
    old = mapped(before)
    fresh: list[Span] = []
    for start, end in sorted(anonymous_spans(after)):
        at = start
        for old_start, old_end in old:
            if old_end <= at or old_start >= end:
                continue
            if old_start > at:
                fresh.append((at, old_start))
            at = max(at, old_end)
        if at < end:
            fresh.append((at, end))
    return [span for span in fresh if span[1] - span[0] >= LARGE]


def _read(path: str) -> str:
    with open(path) as file:
        return file.read()


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.madvise: Callable[[int, int, int], int] = libc.madvise
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        self.memcmp: Callable[[int, int, int], int] = libc.memcmp
        libc.memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        self.mincore: Callable[[int, int, ctypes.Array[ctypes.c_char]], int] = libc.mincore
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def release_zero_chunks(span: Span, libc: _Libc) -> int:
    """madvise away each CHUNK of `span` that is resident in full and reads as zeros (written
    whole with zeros: llama.cpp's clear; pages nothing wrote are left as they are); the bytes
    released. `span` is page-aligned (a mapping)."""
    page = mmap.PAGESIZE
    resident = ctypes.create_string_buffer((span[1] - span[0]) // page)
    if libc.mincore(span[0], span[1] - span[0], resident) != 0:
        return 0
    flags = resident.raw.translate(_LOW_BIT)
    zeros = ctypes.create_string_buffer(CHUNK)
    released = 0
    for at in range(span[0], span[1], CHUNK):
        size = min(CHUNK, span[1] - at)
        first = (at - span[0]) // page
        if b"\0" in flags[first : first + size // page]:
            continue  # a page nothing wrote: not the cleared cache
        if (
            libc.memcmp(at, ctypes.addressof(zeros), size) == 0
            and libc.madvise(at, size, _MADV_DONTNEED) == 0
        ):
            released += size
    return released


class Released:
    """What a context's making released: its new buffers' spans with the bytes of each."""

    def __init__(self) -> None:
        self.spans: dict[Span, int] = {}

    @property
    def bytes(self) -> int:
        return sum(self.spans.values())

    def again(self) -> int:
        """Release the zero chunks of the spans that held the cache once more: after
        `llama_memory_clear(memory, True)`, which writes zeros over the whole cache again. Only
        the context's own thread calls it, so nothing writes into its buffers meanwhile."""
        spans = [span for span, size in self.spans.items() if size]
        if not spans:
            return 0
        libc = _Libc()
        return sum(release_zero_chunks(span, libc) for span in spans)


@contextmanager
def exclusive() -> Iterator[None]:
    """Around a model's load: none of its buffers is written while a context's are released."""
    with _LOCK:
        yield


@contextmanager
def released_after() -> Iterator[Released]:
    """Around the making of a context: on the way out, the chunks of the new buffers that are
    resident in full and read as zeros are released."""
    released = Released()
    if not sys.platform.startswith("linux"):
        yield released
        return
    with _LOCK:
        before = _read("/proc/self/maps")
        yield released
        fresh = new_spans(before, _read("/proc/self/maps"))
        if fresh:
            libc = _Libc()
            released.spans = {span: release_zero_chunks(span, libc) for span in fresh}
