"""Continuous batching: N sequences of one llama.cpp context, one `llama_decode` per step.

One copy of the weights and one context whose KV cache holds `n_seq_max` streams (one per
slot, `context_length` cells each). The scheduler runs on the engine's worker thread. Each step
builds one batch: the next token of every decoding sequence, then prompt tokens of newly
admitted ones, at most `prefill_chunk` of them (chunked prefill: a long prompt is decoded over
several steps while the others keep generating; the shortest prompts go first, so a short
request is not stuck behind a long one). Then every sequence with logits in the batch samples
from its own row with its own sampler chain.

Slots: a new request takes the free slot that keeps the running sequences side by side (llama.cpp
computes one run of consecutive sequence ids per pass), and among those the one whose cached
tokens share the longest prefix with its prompt (reported as cached tokens); a much longer
prefix in another free slot, or in a running sequence's, is copied over; a request whose
prompt a running sequence is still decoding (the `n` choices of one request) waits for it and
copies it, so the prompt is decoded once. A finished sequence leaves its tokens in its slot
for the next request to reuse; a cancelled or failed one has its cells removed at once. A
slot's stream is its own, so what one slot keeps never takes room from another.

LoRA adapters (lora.py) apply to the whole context: a step decodes the sequences of one set of
scales, the sets taking turns, and a slot's cache is reused only under the scales it was
computed with.

Speculative decoding (speculative.py): a decoding sequence may put a draft after its next token
in the same batch, every row with logits; it then samples row after row while what it samples
equals the draft, and the cells of the rows it did not take are removed from its stream.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from dataclasses import replace
from typing import Any

import llama_cpp

from sluicegate.core.errors import EngineFailure
from sluicegate.engines.llamacpp import shift
from sluicegate.engines.llamacpp.channel import Wakeups
from sluicegate.engines.llamacpp.lora import Adapters, Scales
from sluicegate.engines.llamacpp.runtime import LlamaRuntime, shared_prefix
from sluicegate.engines.llamacpp.sequence import Sequence
from sluicegate.engines.llamacpp.server_stats import STATS
from sluicegate.engines.llamacpp.slot_files import SlotAction, check_tokens, restore, save
from sluicegate.engines.llamacpp.speculative import Speculator, Want, tiled
from sluicegate.engines.slots import SlotResult

log = logging.getLogger(__name__)
# A free slot whose cache shares this many more prompt tokens than the best-placed slot's is
# copied into it (a copy of the whole stream, so only for a prefix worth more than that).
COPY_MIN_TOKENS = 32
# Prompt tokens per step on the CPU. A step takes as long as its tokens: 512 prompt tokens of
# a ~100M-parameter model are ~1.7 s on 2 cores, which every other sequence waits for (its
# next token, or its first). On the CPU a smaller chunk costs nothing (2,000 prompt tokens:
# 6.0-7.0 s in chunks of 64, 128, 256 or 512 alike), so a step stays short. On a GPU the
# prompt goes in chunks of `batch_size`, where it is much faster.
CPU_PREFILL_CHUNK = 128
# The hand-over to the event loop with several streams (`_due`): a wake-up costs the loop a
# pipeline step and a socket write per stream (~0.2 ms each on the CPU), taken from a decode
# thread, so when a step takes longer than `stream_interval` a wake-up waits for a second step
# (two tokens a stream) as long as the first of them then waits at most this many intervals.
HOLD_STEPS = 2
HOLD_LIMIT = 3


class Slot:
    __slots__ = ("cached", "id", "lora", "sequence")

    def __init__(self, slot_id: int) -> None:
        self.id = slot_id
        self.cached: list[int] = []  # the tokens whose keys and values are in this stream
        self.sequence: Sequence | None = None
        self.lora: Scales = ()  # the LoRA scales `cached` was computed with


def _runs(ids: set[int]) -> int:
    """How many runs of consecutive numbers `ids` make."""
    return sum(1 for i in ids if i - 1 not in ids)


class BatchScheduler:
    def __init__(
        self,
        runtime: LlamaRuntime,
        stream_interval: float = 0.0,
        speculator: Speculator | None = None,
        adapters: Adapters | None = None,
    ) -> None:
        self.runtime = runtime
        self.adapters = adapters
        self._lora_turn: Scales | None = None  # the scales the last step decoded with
        self.speculator = speculator
        self.slots = [Slot(i) for i in range(runtime.sequences)]
        # The slots holding a sequence, in slot order: what each step walks (not all N slots).
        self._live: list[Slot] = []
        self._cond = threading.Condition()
        self._incoming: deque[Sequence] = deque()
        self._waiting: deque[Sequence] = deque()  # submitted, no free slot yet
        self._actions: deque[SlotAction] = deque()  # slot save/restore/erase, run while it is free
        self._closed = False
        self._batch: Any = llama_cpp.llama_batch_init(runtime.batch_size, 0, 1)
        # The batch's arrays, fetched once: each `batch.token` makes a ctypes pointer object,
        # five a row per step. Every row holds one sequence id (set here, once).
        batch = self._batch
        self._rows: tuple[Any, Any, Any, list[Any]] = (
            batch.token,
            batch.pos,
            batch.logits,
            [batch.seq_id[i] for i in range(runtime.batch_size)],
        )
        for i in range(runtime.batch_size):
            batch.n_seq_id[i] = 1
        self.steps = 0  # decodes run (tests and the bench read it)
        # The prompt tokens a step may hold, over all prefilling sequences.
        self.prefill_chunk = (
            runtime.batch_size if runtime.offloaded else min(runtime.batch_size, CPU_PREFILL_CHUNK)
        )
        # The consumers' channels wake their loop through this: at most once per step
        # (channel.py). While sequences stream and none starts or ends, at most once per
        # `stream_interval` seconds: one wake-up then carries every token since the last, which
        # the loop relays in one step and one write per stream (0: every step).
        self.wakeups = Wakeups()
        self.stream_interval = stream_interval
        self._flushed = 0.0  # time.monotonic() of the last wake-up
        self._held_steps = 0  # decodes since the last wake-up (their tokens wait for the next)
        self._held_since: float | None = None  # the clock when the first of them ended
        self._step_time = 0.0  # the last decode's duration: what holding one more step costs
        self._urgent = False  # a sequence started or ended: its events go with the next step
        self._image_ready = False  # an image's encoder finished since the loop last waited
        # llama-server's `requests_processing` and `requests_deferred` (server_stats.py)
        STATS.attach(id(self), weakref.WeakMethod(self.queues))

    def queues(self) -> tuple[int, int]:
        """Sequences decoding, and waiting for a slot (read by a scrape, on another thread)."""
        return len(self._live), len(self._waiting) + len(self._incoming)

    # --- any thread --------------------------------------------------------------------------

    def submit(self, sequence: Sequence) -> None:
        with self._cond:
            if self._closed:
                raise EngineFailure("the model is unloading", code="model_not_loaded")
            self._incoming.append(sequence)
            self._cond.notify()

    def act(self, action: SlotAction) -> None:
        """Queue a slot action (slot_files.py); it runs once its slot holds no sequence."""
        with self._cond:
            if self._closed:
                raise EngineFailure("the model is unloading", code="model_not_loaded")
            self._actions.append(action)
            self._cond.notify()

    def wake(self) -> None:
        """After a consumer set `cancelled`: the loop notices at its next step."""
        with self._cond:
            self._cond.notify()

    def stop(self) -> None:
        """Ask the loop to end; it fails what it still holds and returns."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    # --- the worker thread -------------------------------------------------------------------

    def run(self) -> None:
        """The loop: until `stop`, admit, reap, step. Runs on the engine's worker thread."""
        try:
            while True:
                # While sequences decode and nothing came, no lock: a step's Python holds the GIL
                # beside an idle decode thread. A submit, action or stop seen a step late costs
                # nothing (the loop goes on while `_live` holds a sequence), and each of them
                # appends or sets under the lock before this thread reads it.
                if self._incoming or self._closed or self._actions or not self._live:
                    with self._cond:
                        while not (
                            self._closed or self._incoming or self._waiting or self._live or self._actions
                        ):
                            self._flush()  # the last events before going idle
                            self._cond.wait()
                        if self._closed:
                            break
                        self._waiting.extend(self._incoming)
                        self._incoming.clear()
                self._reap()
                if self._actions:
                    self._act()
                if self._waiting:
                    self._admit()
                if self._live and not self._step():
                    self._idle()  # only images being encoded: until one is (or a request comes)
        finally:
            self._shutdown()

    def _encoded(self) -> None:
        """An image's encoder finished (on the projector's thread): the loop goes on."""
        with self._cond:
            self._image_ready = True
            self._cond.notify()

    def _idle(self) -> None:
        with self._cond:
            self._flush()
            while not (self._image_ready or self._closed or self._incoming or self._cancelled()):
                self._cond.wait()
            self._image_ready = False

    def _cancelled(self) -> bool:
        return any(s.sequence is not None and s.sequence.job.cancelled for s in self._live)

    def _flush(self) -> None:
        self._flushed = time.monotonic()
        self._urgent = False
        self._held_steps = 0
        self._held_since = None
        self.wakeups.flush()

    def _due(self, now: float, streams: int) -> bool:
        """Whether the events held since the last wake-up go before this step (only tokens of
        `streams` generating sequences: nothing started, ended or failed). Not before
        `stream_interval` has passed; one stream's at once then. With several, whose wake-up
        costs the loop a step and a write per stream, a step longer than the interval would
        make every wake-up carry one token a stream: the first step's tokens wait for a
        second's, unless holding them one more step puts them past `HOLD_LIMIT` intervals."""
        if now - self._flushed < self.stream_interval:
            return False
        if streams < 2 or self._held_steps >= HOLD_STEPS or self._held_since is None:
            return True
        return now + self._step_time - self._held_since > HOLD_LIMIT * self.stream_interval

    def _relist(self) -> None:
        """After a slot gained or lost its sequence."""
        self._live = [slot for slot in self.slots if slot.sequence is not None]

    def _shutdown(self) -> None:
        with self._cond:
            self._closed = True
            left = [*self._waiting, *self._incoming]
            self._waiting.clear()
            self._incoming.clear()
            actions = list(self._actions)
            self._actions.clear()
        for action in actions:
            action.done(EngineFailure("the model was unloaded", code="model_not_loaded"))
        left += [s.sequence for s in self.slots if s.sequence is not None]
        for slot in self.slots:
            slot.sequence = None
        self._live = []
        STATS.detach(id(self))
        for sequence in left:
            sequence.free()
            self._end(sequence, EngineFailure("the model was unloaded", code="model_not_loaded"))
        self._flush()
        llama_cpp.llama_batch_free(self._batch)
        if self.speculator is not None:
            self.speculator.close()

    def _end(self, sequence: Sequence, error: BaseException | None = None) -> None:
        self._urgent = True  # its ending reaches the client at once
        try:
            if error is not None and not sequence.job.cancelled:
                sequence.fail(error)
        finally:
            sequence.done()

    def _drop(self, slot: Slot) -> None:
        """Remove a slot's cells (a cancelled or failed sequence: its cache is not trusted)."""
        llama_cpp.llama_memory_seq_rm(self.runtime.context.memory, slot.id, -1, -1)
        slot.cached.clear()
        if self.speculator is not None:
            self.speculator.drop(slot.id)

    def _release(self, slot: Slot, error: BaseException | None = None, *, keep: bool = True) -> None:
        sequence = slot.sequence
        assert sequence is not None
        slot.sequence = None
        self._relist()
        sequence.free()
        if self.speculator is not None:
            self.speculator.end(slot.id)
        # After a context shift, the cells past its hole were computed with what it dropped: no
        # later prompt reuses them.
        if not keep or sequence.job.usage.shifted_tokens:
            self._drop(slot)
        self._end(sequence, error)

    def _reap(self) -> None:
        """Cancelled sequences leave now, and free their cells."""
        for slot in self._live:  # `_release` rebinds `_live` (`_relist`): this list stays whole
            if slot.sequence is not None and slot.sequence.job.cancelled:
                self._release(slot, keep=False)
        if self._waiting and any(s.job.cancelled for s in self._waiting):
            for sequence in [s for s in self._waiting if s.job.cancelled]:
                self._waiting.remove(sequence)
                self._end(sequence)

    def _admit(self) -> None:
        # Those that keep their place in the queue, in order: pinned to a slot that is not free
        # (`id_slot`), or waiting for a running sequence's prompt (`_follows`).
        held: list[Sequence] = []
        try:
            self._admit_free(held)
        finally:
            self._waiting.extendleft(reversed(held))

    def _admit_free(self, held: list[Sequence]) -> None:
        while self._waiting:
            free = [slot for slot in self.slots if slot.sequence is None]
            if not free:
                break
            sequence = self._waiting.popleft()
            if sequence.pin is not None:  # llama-server's `id_slot`: that slot or none
                free = [slot for slot in free if slot.id == sequence.pin]
                if not free:
                    held.append(sequence)
                    continue
            try:
                tokens = self._prepare(sequence)
            except Exception as exc:
                sequence.free()  # its image chunks, if `check` tokenized it with them
                self._end(sequence, exc)
                continue
            if self._follows(sequence, tokens, free):
                held.append(sequence)
                continue
            slot, keep = self._place(free, tokens, sequence.lora)
            media = sequence.job.media
            if media is not None and media.snap(keep) < keep:  # never a cache ending inside an image
                keep = media.snap(keep)
                llama_cpp.llama_memory_seq_rm(self.runtime.context.memory, slot.id, keep, -1)
                del slot.cached[keep:]
            if not self.runtime.reusable(slot.id, keep):  # a sliding window moved past the prefix
                keep = 0
                self._drop(slot)
            slot.sequence = sequence
            slot.lora = sequence.lora
            self._relist()
            if self.speculator is not None:
                self.speculator.start(slot.id, sequence.job.prediction, len(tokens))
            sequence.slot = slot.id
            sequence.start(keep)

    def _follows(self, sequence: Sequence, tokens: list[int], free: list[Slot]) -> bool:
        """True when a running sequence is still decoding a prompt this one shares (the `n`
        choices of one request, `turn/choices.py`, come together): it waits until that prompt
        is in the cache, then `_place` copies it instead of decoding it again."""
        if sequence.job.media is not None:
            return False
        best = max(
            (shared_prefix(slot.cached, tokens) for slot in free if slot.lora == sequence.lora), default=0
        )
        return any(
            slot.sequence.prefilling
            and slot.sequence.job.media is None
            and slot.sequence.lora == sequence.lora
            and shared_prefix(slot.sequence.job.tokens, tokens) >= best + COPY_MIN_TOKENS
            for slot in self._live
            if slot.sequence is not None
        )

    def _act(self) -> None:
        """Run the slot actions whose slot holds no sequence; the others wait for theirs to
        end (llama-server defers them likewise). Before admitting: an action queued before a
        request pinned to its slot runs first."""
        with self._cond:
            pending = list(self._actions)
            self._actions.clear()
        later: list[SlotAction] = []
        for action in pending:
            slot = self.slots[action.slot]
            if slot.sequence is not None:
                later.append(action)
                continue
            try:
                result = self._slot_action(slot, action)
            except Exception as exc:
                action.done(exc)
            else:
                action.done(result)
        if later:
            with self._cond:
                self._actions.extendleft(reversed(later))

    def _slot_action(self, slot: Slot, action: SlotAction) -> SlotResult:
        ctx = self.runtime.context.ctx
        if action.kind == "save":
            assert action.path is not None
            return save(ctx, slot.id, action.path, slot.cached)
        erased = len(slot.cached)
        self._drop(slot)  # a restore replaces the stream: its cells, and a draft model's, go first
        if action.kind == "erase":
            return SlotResult(erased, 0, 0.0)
        assert action.path is not None
        try:
            tokens, result = restore(ctx, slot.id, action.path, self.runtime.n_ctx)
            check_tokens(tokens, self.runtime.n_vocab, media=self.runtime.projector is not None)
        except BaseException:
            self._drop(slot)  # what a failed load left is not trusted
            raise
        slot.cached = tokens
        slot.lora = action.lora
        return result

    def _place(self, free: list[Slot], tokens: list[int], lora: Scales = ()) -> tuple[Slot, int]:
        """The slot for a prompt, and how many of its tokens that slot's cache already holds.

        Where it goes matters for speed: with one KV stream per sequence, llama.cpp splits a
        batch into one compute per run of consecutive sequence ids, so running sequences in
        slots 0, 1, 2, 3 decode in one pass over the weights and in 0, 2, 4, 6 in four. So the
        slot that keeps the running ones in the fewest runs, and among those the one sharing
        the longest prefix with the prompt. When another free slot holds a longer prefix, its
        stream is copied there (a memory copy: far cheaper than decoding those tokens again).
        """
        active = {slot.id for slot in self.slots if slot.sequence is not None}
        limit = len(tokens) - 1  # the last prompt token is decoded again, for its logits
        # Copied from: a free slot's cache, or a running sequence's once its prompt is in; a cache
        # computed under other LoRA scales holds other keys and values: nothing shared.
        sources = free + [
            slot
            for slot in self._live
            if slot.sequence is not None
            and not slot.sequence.prefilling
            and slot.sequence.job.media is None
            and not slot.sequence.job.usage.shifted_tokens
        ]
        shared = {
            slot.id: min(shared_prefix(slot.cached, tokens), limit) if slot.lora == lora else 0
            for slot in sources
        }
        runs = {slot.id: _runs(active | {slot.id}) for slot in free}
        slot = min(free, key=lambda s: (runs[s.id], -shared[s.id]))
        richest = max(sources, key=lambda s: shared[s.id])
        memory = self.runtime.context.memory
        if shared[richest.id] >= shared[slot.id] + COPY_MIN_TOKENS:
            llama_cpp.llama_memory_seq_cp(memory, richest.id, slot.id, -1, -1)
            slot.cached = richest.cached[:]
            shared[slot.id] = shared[richest.id]
        keep = shared[slot.id]
        if keep < len(slot.cached):
            if not llama_cpp.llama_memory_seq_rm(memory, slot.id, keep, -1):
                keep = 0
                self._drop(slot)
            del slot.cached[keep:]
        return slot, keep

    def _prepare(self, sequence: Sequence) -> list[int]:
        """Tokenize, and refuse a prompt that cannot fit one sequence's context."""
        runtime, job = self.runtime, sequence.job
        if not job.tokens:
            job.tokens = runtime.prompt_tokens(job, sequence.prompt)
        limit = runtime.n_ctx if sequence.cap is None else min(sequence.cap, runtime.n_ctx)
        if len(job.tokens) >= limit:
            raise EngineFailure(
                f"The prompt is {len(job.tokens)} tokens, more than the context length ({limit}) of the model.",
                code="context_length_exceeded",
            )
        if limit < runtime.n_ctx:  # a per-request cap: prompt and output stay within it
            room = limit - len(job.tokens)
            asked = job.sampling.max_tokens
            job.sampling = replace(job.sampling, max_tokens=room if asked is None else min(asked, room))
        return job.tokens

    def _image(self, slot: Slot) -> bool:
        """The next piece of the image its sequence's prompt goes on with, in a decode of its
        own (embeddings cannot share a batch with tokens), one piece a step: the encoder (on
        the projector's thread, while the others go on), then the embeddings a prompt chunk at
        a time, so the other sequences wait no longer than for a prompt step. An image that
        must go whole goes in one step. False while its encoder is still at work."""
        sequence = slot.sequence
        assert sequence is not None and sequence.job.media is not None
        runtime = self.runtime
        here = sequence.base + sequence.prompt_done
        covering = sequence.job.media.covering(here)
        assert covering is not None and runtime.projector is not None
        start, span = covering
        if span.encoding is not None and not span.encoding.done():
            return False
        self._flush()  # what the others have so far goes out while the image decodes
        try:
            if not runtime.projector.splittable(span):
                taken = runtime.decode_image(
                    sequence.job.media, start, position=len(slot.cached), seq_id=slot.id
                )
            elif span.embeddings is None:  # the encoder runs on its own thread meanwhile
                if span.encoding is None:
                    runtime.projector.encode_soon(span, runtime.n_embd, self._encoded)
                    return False
                encoding, span.encoding = span.encoding, None
                encoding.result()  # an encoder's failure fails its sequence
                return True
            else:  # then its embeddings, a prompt chunk at a time
                done = here - start
                taken = min(self.prefill_chunk, span.n_tokens - done)
                runtime.decode_image_part(
                    span, done=done, count=taken, position=len(slot.cached), seq_id=slot.id
                )
                if done + taken == span.n_tokens:
                    span.embeddings = None
        except Exception as exc:
            self._release(slot, exc, keep=False)
            return True
        self.steps += 1
        if taken:
            slot.cached.extend(sequence.todo[sequence.prompt_done : sequence.prompt_done + taken])
            sequence.prefilled(taken)
        return True

    def _step(self) -> bool:
        """One decode; False when there was nothing to do (only images being encoded)."""
        runtime, batch = self.runtime, self._batch
        token_at, pos_at, logits_at, seq_at = self._rows
        room = runtime.batch_size
        live = self._live if self.adapters is None else self._lora_group()
        # What each slot puts in the batch: (slot, tokens, prompt tokens among them).
        parts: list[tuple[Slot, list[int], int]] = []
        prefilling: list[Slot] = []
        image_ran = False
        for slot in live:
            sequence = slot.sequence
            assert sequence is not None
            if sequence.next_token is not None:
                if sequence.job.shift_keep is not None and shift.due(len(slot.cached), runtime.n_ctx):
                    self._shift(slot, sequence, shift.kept(sequence.job.shift_keep, len(sequence.job.tokens)))
                parts.append((slot, [sequence.next_token], 0))
                room -= 1
            elif sequence.prefilling:
                at_image, _ = sequence.next_image()
                if not at_image:
                    prefilling.append(slot)
                elif not image_ran:  # one image a step (one that is still encoding lets another go)
                    image_ran = self._image(slot)
                    # Its last piece decoded: the text after it goes in this step's batch, as in
                    # llama-server, not a step later (which the whole batch would wait for).
                    if slot.sequence is sequence and sequence.prefilling and not sequence.next_image()[0]:
                        prefilling.append(slot)
        if len(prefilling) > 1:
            prefilling.sort(key=lambda s: len(s.sequence.todo) - s.sequence.prompt_done if s.sequence else 0)
        space, room = room, min(room, self.prefill_chunk)  # the batch's room, the step's budget
        for slot in prefilling:  # the shortest prompts first
            if room <= 0:
                break
            sequence = slot.sequence
            assert sequence is not None
            left = len(sequence.todo) - sequence.prompt_done
            image = sequence.next_image()[1]
            if image is not None:  # text up to the next image: the image goes in a step of its own
                left = image - sequence.prompt_done
            # A tail of a quarter chunk or less goes along now: a step of its own (or a compute
            # of its own beside the next prompt's chunk) would cost more than its tokens.
            take = left if left - room <= self.prefill_chunk // 4 and left <= space else room
            chunk = sequence.todo[sequence.prompt_done : sequence.prompt_done + take]
            parts.append((slot, chunk, len(chunk)))
            room -= len(chunk)
            space -= len(chunk)
        if self.speculator is not None and self.speculator.active and space > 0:
            self._draft(parts, space)
        # Rows in slot order: llama.cpp puts consecutive sequence ids in one compute (`_place`).
        if prefilling:
            parts.sort(key=lambda part: part[0].id)
        n = 0
        # (slot, first batch row with logits or -1, tokens added to the slot's cache (a decoding
        # sequence's next token and its draft), prompt tokens)
        plan: list[tuple[Slot, int, list[int], int]] = []
        for slot, tokens, prompt_tokens in parts:
            sequence = slot.sequence
            assert sequence is not None
            position, seq = len(slot.cached), slot.id
            first = n
            for offset, token in enumerate(tokens):
                token_at[n] = token
                pos_at[n] = position + offset
                seq_at[n][0] = seq
                logits_at[n] = not prompt_tokens  # every row of a decoding sequence (its draft)
                n += 1
            if prompt_tokens:  # logits for a prompt's last token
                last = sequence.prompt_done + prompt_tokens == len(sequence.todo)
                logits_at[n - 1] = last
                plan.append((slot, n - 1 if last else -1, tokens, prompt_tokens))
            else:
                plan.append((slot, first, tokens, 0))
        if not n:
            return image_ran
        batch.n_tokens = n
        # The last steps' events go now, to be consumed while this step decodes.
        started = time.monotonic()
        if prefilling or self._urgent or self._due(started, len(plan)):
            self._flush()
        status = llama_cpp.llama_decode(runtime.context.ctx, batch)
        ended = time.monotonic()
        self._step_time = ended - started
        self._held_steps += 1
        if self._held_since is None:
            self._held_since = ended
        self.steps += 1
        STATS.decoded(len(plan))
        if status != 0:
            error = EngineFailure(f"llama_decode failed ({status})", code="decode_failed")
            for slot, *_ in plan:
                if slot.sequence is not None:
                    self._release(slot, error, keep=False)
            return True
        for slot, row, tokens, prompt_tokens in plan:
            if len(tokens) > 1 and not prompt_tokens:
                self._verify(slot, row, tokens)
                continue
            slot.cached.extend(tokens)
            sequence = slot.sequence
            if sequence is None:
                continue
            try:
                if prompt_tokens:
                    sequence.prefilled(prompt_tokens)
                    if sequence.prefilling:
                        continue
                    sequence.begin_sampling(runtime)
                    self._urgent = True  # its first token goes at once
                finish = sequence.accept(runtime, row)
                if finish is not None:
                    sequence.finish(finish)
                    self._release(slot)
            except Exception as exc:
                log.exception("sequence %d failed", slot.id)
                self._release(slot, exc, keep=False)
        return True

    def _shift(self, slot: Slot, sequence: Sequence, keep: int) -> None:
        """Its context is full: drop half of it (shift.py) so that it goes on generating."""
        dropped = shift.shift(self.runtime.context.memory, slot.id, slot.cached, self.runtime.n_ctx, keep)
        sequence.job.usage.shifted_tokens += dropped
        assert sequence.next_token is not None
        sequence.history = [*slot.cached, sequence.next_token]
        if self.speculator is not None:
            self.speculator.shifted(slot.id)

    def _lora_group(self) -> list[Slot]:
        """The live slots this step decodes: those of one set of LoRA scales (llama.cpp applies
        adapters to the whole context), set on the context; each set takes its turn."""
        assert self.adapters is not None
        sets = sorted({slot.sequence.lora for slot in self._live if slot.sequence is not None})
        later = [s for s in sets if self._lora_turn is not None and s > self._lora_turn]
        chosen = later[0] if later else sets[0]
        self._lora_turn = chosen
        self.adapters.apply(self.runtime.context.ctx, chosen)
        return [slot for slot in self._live if slot.sequence is not None and slot.sequence.lora == chosen]

    def _draft(self, parts: list[tuple[Slot, list[int], int]], space: int) -> None:
        """Drafts after the next tokens of the decoding sequences, within the batch's `space`."""
        speculator = self.speculator
        assert speculator is not None
        wants: list[Want] = []
        where: list[int] = []
        for i, (slot, _, prompt_tokens) in enumerate(parts):
            sequence = slot.sequence
            if prompt_tokens or sequence is None or not speculator.drafting(slot.id):
                continue
            # What its gauge allows now (adaptive.py), cut to what the sequence may still output
            # (and so to its context) and to the batch. A want of 0 still checks a shadow draft.
            # And to the context's cells after its next token's but the last (more than the
            # output limit leaves when the context shifts): a context shift, due when one cell
            # is left, then comes where it would without drafts, and so does the output.
            room = self.runtime.n_ctx - len(slot.cached) - 2
            most = max(0, min(speculator.most(slot.id), sequence.draft_room(), space, room))
            wants.append((slot.id, sequence.history, most))
            where.append(i)
            space -= most
        if not wants:
            return
        try:
            drafts = speculator.draft(wants)
        except Exception:
            log.exception("drafting failed; this step decodes without drafts")
            return
        for i, draft in zip(where, drafts, strict=True):
            slot, tokens, _ = parts[i]
            if draft and speculator.predicting(slot.id):
                # A prediction's drafts run long: their rows cut to whole tiles (`tiled`), as
                # a row past a tile costs most of a tile (bench/README.md, round nine).
                draft = draft[: tiled(len(draft))]
            if draft:
                parts[i] = (slot, [tokens[0], *draft], 0)

    def _verify(self, slot: Slot, row: int, tokens: list[int]) -> None:
        """A decoding sequence's next token and draft are in: sample row after row while the
        draw equals the draft, keep the cells of the rows it took, remove the others'."""
        sequence, speculator = slot.sequence, self.speculator
        assert sequence is not None and speculator is not None
        draft = tokens[1:]
        taken = 0
        finish = None
        try:
            for i in range(len(tokens)):
                # A stop string, end of generation or the limit inside the draft ends it there.
                finish = sequence.accept(self.runtime, row + i)
                if finish is not None or i == len(draft) or sequence.next_token != draft[i]:
                    break
                taken += 1
        except Exception as exc:
            log.exception("sequence %d failed", slot.id)
            slot.cached.extend(tokens)
            self._release(slot, exc, keep=False)
            return
        finally:
            speculator.record(slot.id, len(draft), taken)
            STATS.drafted(len(draft), taken)
            usage = sequence.job.usage  # the request's own counts (OpenAI's prediction tokens)
            usage.accepted_prediction_tokens += taken
            usage.rejected_prediction_tokens += len(draft) - taken
        slot.cached.extend(tokens[: 1 + taken])
        if taken < len(draft):
            llama_cpp.llama_memory_seq_rm(self.runtime.context.memory, slot.id, len(slot.cached), -1)
        if finish is not None:
            sequence.finish(finish)
            self._release(slot)
