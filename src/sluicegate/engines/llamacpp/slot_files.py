"""llama-server's slot actions (`POST /slots/{id}?action=save|restore|erase`): a slot's KV cache
written to a file with llama.cpp's `llama_state_seq_save_file`, read back into a slot with
`llama_state_seq_load_file`, or erased. The scheduler (scheduler.py) runs them on its own thread
while the slot holds no sequence, so a stream is never read or written under a decode.

The file holds the slot's tokens as a plain token list, the format llama-server reads from older
versions (its own now starts with LLAMA_TOKEN_NULL, a version and the count: read here too, when
it holds no media). An image's positions are its placeholder ids (negative: vision.py), so a
restored image prefix is reused by the same image again, and refused without a projector.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from sluicegate.core.errors import EngineFailure, invalid
from sluicegate.core.slots import SLOT
from sluicegate.engines.slots import SlotKind, SlotResult

if TYPE_CHECKING:  # the scheduler imports this module
    from sluicegate.engines.llamacpp.scheduler import BatchScheduler

TOKEN_NULL = -1  # llama-server's format marker (LLAMA_TOKEN_NULL)
PACKED_VERSION = 1  # the only version of llama-server's packed tokens this reads


@dataclass(slots=True)
class SlotAction:
    """One action, queued to the scheduler; `done` gets its result or its error (on the
    scheduler's thread: it must only hand it over)."""

    slot: int
    kind: SlotKind
    path: Path | None
    done: Callable[[SlotResult | BaseException], None]
    lora: tuple[float, ...] = ()  # the LoRA scales a restored cache counts as computed with


def save(ctx: Any, seq_id: int, path: Path, tokens: list[int]) -> SlotResult:
    start = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    written = llama_cpp.llama_state_seq_save_file(ctx, str(path).encode(), seq_id, array, len(tokens))
    if written == 0:
        raise EngineFailure("Unable to save slot", code="slot_save_failed")
    return SlotResult(len(tokens), int(written), (time.perf_counter() - start) * 1000)


def restore(ctx: Any, seq_id: int, path: Path, capacity: int) -> tuple[list[int], SlotResult]:
    """Load `path` into `seq_id` (whose cells the caller removed first): its tokens, as they
    stand in the stream. `capacity`: the most tokens the slot's context holds."""
    start = time.perf_counter()
    if not path.is_file():
        raise invalid(f"Unable to restore slot: no file {path.name!r} in the slot save directory")
    room = capacity + 64  # llama-server's packed header and trailer take a few words more
    array = (llama_cpp.llama_token * room)()
    count = ctypes.c_size_t(0)
    read = llama_cpp.llama_state_seq_load_file(
        ctx, str(path).encode(), seq_id, array, room, ctypes.byref(count)
    )
    if read == 0:
        raise invalid("Unable to restore slot: No available space in KV cache or invalid slot save file")
    tokens = unpack(list(array[: count.value]))
    if len(tokens) > capacity:
        raise invalid("Unable to restore slot: Restored prompt does not fit in the slot context")
    return tokens, SlotResult(len(tokens), int(read), (time.perf_counter() - start) * 1000)


def unpack(words: list[int]) -> list[int]:
    """A plain token list as it is; llama-server's packed tokens without media as their list."""
    if not words or words[0] != TOKEN_NULL:
        return words
    if len(words) < 4 or words[1] != PACKED_VERSION:
        raise invalid("Unable to restore slot: Unsupported server tokens state version")
    n = words[2] & 0xFFFFFFFF
    if len(words) < 4 + n:
        raise invalid("Unable to restore slot: invalid slot save file")
    if words[3 + n] != 0:
        raise invalid("Unable to restore slot: llama-server's media chunks cannot be restored here")
    return words[3 : 3 + n]


def check_tokens(tokens: list[int], n_vocab: int, *, media: bool) -> None:
    """Every id a token of this vocabulary, or an image's placeholder where a projector is."""
    for token in tokens:
        if token >= n_vocab:
            raise invalid("Unable to restore slot: Invalid tokens in slot save file")
        if token < 0 and not media:
            raise invalid("Unable to restore slot: Cannot restore media tokens without an mmproj")


def pinned(extra: dict[str, Any], slots: int) -> int | None:
    """A request's `id_slot` (core/slots.py): a slot of this engine's, else a 400; -1: any."""
    slot = extra.get(SLOT)
    if slot is None or slot == -1:
        return None
    if not isinstance(slot, int) or not 0 <= slot < slots:
        raise invalid(f"Invalid slot ID {slot}: this model has slots 0 to {slots - 1}", param="id_slot")
    return slot


async def run(
    scheduler: BatchScheduler, slot: int, kind: SlotKind, path: Path | None, lora: tuple[float, ...] = ()
) -> SlotResult:
    """Queue an action on the scheduler's thread and wait for it (llama-server's slot task)."""
    if not 0 <= slot < len(scheduler.slots):
        raise invalid("Invalid slot ID", param="id_slot")
    loop = asyncio.get_running_loop()
    future: asyncio.Future[SlotResult] = loop.create_future()

    def settle(outcome: SlotResult | BaseException) -> None:
        if future.done():  # the client went away meanwhile
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def done(outcome: SlotResult | BaseException) -> None:  # on the scheduler's thread
        with contextlib.suppress(RuntimeError):  # the loop closed (shutdown): nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    scheduler.act(SlotAction(slot, kind, path, done, lora))
    return await future
