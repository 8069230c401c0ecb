"""Which replica of an upstream a request goes to: the `routing` policies' state.

- `least_busy` (the default): the replica with the fewest requests in flight.
- `round_robin`: each replica in turn.
- `prefix_affinity`: a request that shares a prompt prefix with an earlier one (the same
  conversation; the same system prompt and tools) goes to the replica that served that prefix
  last, where its KV cache most likely still is, unless that replica is overloaded.

A request's prefix is hashed at message boundaries: a chain of hashes, one per message, each
over the one before and the message, seeded with the upstream model and the tools; the longest
one the table knows wins. The table is an LRU of at most `routing_table_size` entries in this
process, and with `[store] backend = "redis"` also written to Redis (one short key per prefix,
with a TTL), so Sluicegate replicas behind one load balancer route a conversation alike. Redis
is a hint, never a dependency: a lookup or write that fails or is slow is skipped (logged once
a minute), Redis is left alone for `SHARED_REST` seconds, and the local table decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal, get_args

import orjson

from sluicegate.core.request import ChatRequest, Message

log = logging.getLogger(__name__)

Policy = Literal["least_busy", "prefix_affinity", "round_robin"]
POLICIES: tuple[str, ...] = get_args(Policy)

# A prefix shorter than this (rendered bytes: ~64 tokens) is not worth leaving the least busy
# replica for: its cache saves less than a queue costs. Short first turns ("hi") are skipped.
MIN_PREFIX_BYTES = 256
SHARED_TTL = 600.0  # seconds a prefix stays in Redis after it was last served (KV caches turn over)
SHARED_TIMEOUT = 0.2  # seconds a Redis lookup may add to a request before it is skipped
SHARED_KEYS_PER_REQUEST = 8  # written to Redis per request: the first prefix and the longest ones
SHARED_PENDING = 64  # Redis writes in flight at most; more are dropped (a hint, not a record)
SHARED_REST = 5.0  # seconds Redis is left alone after it failed: no request waits on a dead one
WARN_EVERY = 60.0


def prefix_keys(model: str, request: ChatRequest) -> list[bytes]:
    """The request's prefix hashes, shortest first: the tools', then one per message boundary,
    each only when its prefix is at least `MIN_PREFIX_BYTES` long. The last covers everything."""
    seed = hashlib.blake2b(digest_size=16)
    seed.update(model.encode())
    size = 0
    for tool in request.tools:  # rendered before the messages by chat templates
        rendered = orjson.dumps(
            [tool.name, tool.description, tool.parameters, tool.strict], option=orjson.OPT_SORT_KEYS
        )
        seed.update(rendered)
        size += len(rendered)
    key = seed.digest()
    keys: list[bytes] = [key] if size >= MIN_PREFIX_BYTES else []
    for message in request.messages:
        rendered = _render(message)
        size += len(rendered)
        step = hashlib.blake2b(key, digest_size=16)
        step.update(rendered)
        key = step.digest()
        if size >= MIN_PREFIX_BYTES:
            keys.append(key)
    return keys


def _render(message: Message) -> bytes:
    """What of a message reaches the upstream's prompt, as bytes (equal messages, equal bytes)."""
    content: Any = message.content
    if not isinstance(content, str):
        content = [
            [part.type, part.text, part.image_url, part.audio_data, part.audio_format] for part in content
        ]
    calls = [[call.id, call.name, call.arguments] for call in message.tool_calls]
    return orjson.dumps([message.role, content, message.name, calls, message.tool_call_id, message.reasoning])


class PrefixTable:
    """Prefix hash → the name of the replica that served it last; the least recently used
    entry goes when the table is full."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, keys: Sequence[bytes]) -> str | None:
        """The replica of the longest known prefix among `keys` (shortest first)."""
        for key in reversed(keys):
            name = self._entries.get(key)
            if name is not None:
                self._entries.move_to_end(key)
                return name
        return None

    def record(self, keys: Sequence[bytes], name: str) -> None:
        entries = self._entries
        for key in keys:
            entries[key] = name
            entries.move_to_end(key)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)


class SlotMap:
    """prefix_affinity inside one llama-server replica: which of its slots holds a conversation.

    llama-server gives a request the idle slot whose cached prompt shares the longest prefix
    with it, and never an empty slot while any cached one shares more than 10% — so with one
    system prompt for all, each new conversation takes over another one's slot, and a replica
    with six slots keeps two or three conversations. Here each request's whole prompt is
    remembered with the slot it was sent to (`id_slot`, llama-server's own request field); the
    conversation's next turn, which starts with that prompt, goes to that slot, and a new one
    goes to the slot used least recently (never-used first). A slot busy (ours in flight, or
    reported processing) is not pinned: llama-server would make the request wait for it."""

    def __init__(self, max_entries: int) -> None:
        self.table = PrefixTable(max_entries)  # a request's whole-prompt hash → its slot
        self.in_flight: dict[int, int] = {}
        self.last_pinned: dict[int, int] = {}  # slot → the tick it was last pinned
        self._tick = 0

    def pin(self, keys: Sequence[bytes], capacity: int, busy: frozenset[int]) -> int | None:
        """The slot for a request with these prefix hashes, held until `unpin`; None: let
        llama-server choose (every slot is busy)."""

        def free(slot: int) -> bool:
            return not self.in_flight.get(slot) and slot not in busy

        known = self.table.lookup(keys)
        slot = int(known) if known is not None and int(known) < capacity else None
        if slot is None or not free(slot):
            frees = [s for s in range(capacity) if free(s)]
            if not frees:
                return None
            slot = min(frees, key=lambda s: self.last_pinned.get(s, -1))
        self._tick += 1
        self.last_pinned[slot] = self._tick
        self.in_flight[slot] = self.in_flight.get(slot, 0) + 1
        if keys:  # only the whole prompt: a shared system prompt alone names no conversation's slot
            self.table.record(keys[-1:], str(slot))
        return slot

    def unpin(self, slot: int) -> None:
        self.in_flight[slot] = max(0, self.in_flight.get(slot, 0) - 1)


def with_slot(body: bytes, slot: int) -> bytes:
    """The JSON request body with llama-server's `id_slot` set (the client's own, if it sent
    one, is left alone: the caller checks)."""
    return b'{"id_slot":%d,' % slot + body[1:]


class SharedPrefixes:
    """The prefix table's copy in Redis: `P route:<hash>` → replica name, with a TTL."""

    def __init__(self, url: str, *, prefix: str = "sluicegate:") -> None:
        from redis.asyncio import Redis  # redis-py is imported only when used

        self.prefix = f"{prefix}route:"
        self.redis: Any = Redis.from_url(url, socket_connect_timeout=SHARED_TIMEOUT, socket_timeout=1.0)
        self._pending: set[asyncio.Task[None]] = set()
        self._warned = 0.0
        self._rest_until = 0.0

    def _key(self, key: bytes) -> str:
        return self.prefix + key.hex()

    async def fetch(self, keys: Sequence[bytes]) -> list[str | None] | None:
        """Each key's replica (None: unknown), or None when Redis did not answer in time (or
        failed a moment ago)."""
        if time.monotonic() < self._rest_until:
            return None
        try:
            async with asyncio.timeout(SHARED_TIMEOUT):
                values = await self.redis.mget([self._key(k) for k in keys])
        except Exception as exc:  # down, slow, or anything else: routing goes on locally
            self._warn(exc)
            return None
        return [v.decode() if isinstance(v, bytes) else v for v in values]

    def publish(self, keys: Sequence[bytes], name: str) -> None:
        """Write in the background (the request does not wait); dropped when many are pending."""
        if not keys or len(self._pending) >= SHARED_PENDING or time.monotonic() < self._rest_until:
            return
        if len(keys) > SHARED_KEYS_PER_REQUEST:  # the shared system prompt, and the conversation
            keys = [keys[0], *keys[-(SHARED_KEYS_PER_REQUEST - 1) :]]
        task = asyncio.get_running_loop().create_task(self._write(keys, name))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, keys: Sequence[bytes], name: str) -> None:
        try:
            async with asyncio.timeout(1.0):
                pipe = self.redis.pipeline(transaction=False)
                for key in keys:
                    pipe.set(self._key(key), name, ex=int(SHARED_TTL))
                await pipe.execute()
        except Exception as exc:
            self._warn(exc)

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        self._rest_until = now + SHARED_REST
        if now - self._warned >= WARN_EVERY:
            self._warned = now
            log.warning("prefix routing: Redis is unavailable (%s); routing on this replica's table", exc)

    async def aclose(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.redis.aclose()


# Where the prefix tables are shared: the Redis URL of `[store] backend = "redis"`, set by the
# app factory (engines do not read the store's settings; None: each process keeps its own).
_shared_url: str | None = None


def share_through_redis(url: str | None) -> None:
    global _shared_url
    _shared_url = url


def shared_url() -> str | None:
    return _shared_url
