"""The shared store: Redis, so several replicas continue each other's conversations and runs.

`[store] backend = "redis"` and `url = "redis://host:6379/0"`. Uses redis-py's asyncio client
(no thread pool at all). Everything expires with the response (`PEXPIREAT` = retention).

Keys (`P` is the prefix, `sluicegate:` by default; `S` the scope, `R` the response id):

    P r:S:R        hash: response, input_items, conversation, template, in_flight, next_seq,
                   created_at, expires_at, owner
    P i:S:<id>     an item by id ({"r": R, "item": ...}; a lookup checks R still exists)
    P c:S:<call>   a function_call item by call_id, same shape
    P e:S:R        stream: one entry per batch of frames, id `<last seq + 1>-0`, fields f (first
                   seq) and d (codec.pack_batch); the end marker `<next seq>-1` once finished.
                   XRANGE from `<after + 2>-0` is `starting_after`; XREAD BLOCK follows live.
    P lease:S:R    the owning replica's id while a run is in flight (PX lease, renewed)
    P cancel:S:R   a cancel request for the owner (also published on channel P cancel)
    P running      set of `S:R` in flight, swept for expired leases

Durability is Redis's: a write returns once Redis acknowledged it; surviving a Redis restart
needs Redis persistence (appendonly yes, appendfsync everysec or always) — an operator's
choice, documented in the README. A replica that dies mid-run stops renewing its lease; any
replica's sweep then finishes the run as `failed` with code `owner_lost`.

Redis unreachable → `StoreUnavailable` (503), after a short retry; redis-py reconnects on the
next call, so service resumes when Redis does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import WatchError

from sluicegate.store.base import (
    Json,
    Store,
    StoredResponse,
    StoreUnavailable,
    failed_snapshot,
    indexed_items,
    lost_error,
)
from sluicegate.store.codec import (
    batches,
    dump_template,
    load_template,
    pack_batch,
    template_of,
    unpack_batch,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

PUT_BATCH = 256
READ_BATCHES = 16
BLOCK_MS = 2000  # one XREAD BLOCK wait of a follower (it then checks the run is still alive)
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


class RedisStore(Store):
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "sluicegate:",
        lease_seconds: float = 10.0,
        renew_seconds: float = 2.0,
        replica: str | None = None,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.replica = replica or uuid.uuid4().hex
        # Typed as Any: redis-py types every reply as bytes | str | None (decode_responses
        # is a runtime switch); with decode_responses off every reply here is bytes.
        self.redis: Any = Redis.from_url(
            url,
            socket_connect_timeout=2.0,
            socket_timeout=max(10.0, BLOCK_MS / 1000 + 5),
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
            health_check_interval=30,
        )
        self._owned: set[tuple[str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._subscribed = asyncio.Event()

    # -- plumbing --------------------------------------------------------------------------

    def _key(self, kind: str, scope: str, name: str) -> str:
        return f"{self.prefix}{kind}:{scope}:{name}"

    @property
    def _running(self) -> str:
        return f"{self.prefix}running"

    @property
    def _channel(self) -> str:
        return f"{self.prefix}cancel"

    async def _do(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except _DOWN as e:
            raise StoreUnavailable(str(e)) from e

    async def start(self) -> None:
        try:
            await super().start()
        except StoreUnavailable:  # serve anyway: requests get 503s, the sweep recovers later
            log.warning(
                "Redis at %s is unreachable; runs left in flight are recovered once it is back", self.url
            )
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._keep_leases(), name="store leases"),
            loop.create_task(self._watch_cancels(), name="store cancels"),
        ]
        # Cancels published before the subscription would wait for the lease loop's check.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), 5.0)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        with contextlib.suppress(*_DOWN):
            if self._owned:  # a clean stop hands the runs over at once instead of after a lease
                await self.redis.delete(*(self._key("lease", s, r) for s, r in self._owned))
        await self.redis.aclose()

    # -- responses ---------------------------------------------------------------------------

    async def _write(self, scope: str, r: StoredResponse, *, in_flight: bool) -> None:
        key, stream = self._key("r", scope, r.id), self._key("e", scope, r.id)
        template = template_of(r.response)
        expire_ms = _ms(r.expires_at)
        old = (
            await self.redis.hmget(key, ["template", "next_seq", "in_flight"])
            if not in_flight
            else [None] * 3
        )
        keep_log = not in_flight and not r.events and old[0] is not None
        fields: dict[str, Any] = {
            "response": orjson.dumps(r.response),
            "input_items": orjson.dumps(r.input_items),
            "conversation": orjson.dumps(r.conversation),
            "created_at": repr(r.created_at),
            "expires_at": repr(r.expires_at),
            "in_flight": "1" if in_flight else "0",
            "owner": self.replica,
        }
        if keep_log:
            next_seq = int(old[1] or 0)
        else:
            next_seq = len(r.events)
            fields["template"] = dump_template(template)
        fields["next_seq"] = next_seq
        member = f"{scope}:{r.id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.pexpireat(key, expire_ms)
            if not keep_log:
                pipe.delete(stream)
                for n, batch in enumerate(batches(r.events, PUT_BATCH)):
                    first = n * PUT_BATCH
                    pipe.xadd(
                        stream, {"f": first, "d": pack_batch(batch, template)}, id=f"{first + len(batch)}-0"
                    )
            for item in indexed_items(r):
                value = orjson.dumps({"r": r.id, "item": item})
                pipe.set(self._key("i", scope, item["id"]), value, pxat=expire_ms)
                if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
                    pipe.set(self._key("c", scope, item["call_id"]), value, pxat=expire_ms)
            if in_flight:
                pipe.sadd(self._running, member)
                pipe.set(self._key("lease", scope, r.id), self.replica, px=_ms(self.lease_seconds))
            else:
                if r.events or old[2] == b"1":  # a run's log ends: wakes followers everywhere
                    pipe.xadd(stream, {"end": 1}, id=f"{next_seq}-1")
                pipe.srem(self._running, member)
                pipe.delete(self._key("lease", scope, r.id), self._key("cancel", scope, r.id))
            pipe.pexpireat(stream, expire_ms)
            await pipe.execute()

    async def put(self, record: StoredResponse, *, scope: str = "") -> None:
        await self._do(lambda: self._write(scope, record, in_flight=False))
        self._owned.discard((scope, record.id))

    async def create_run(self, record: StoredResponse, *, scope: str = "") -> None:
        self._owned.add((scope, record.id))
        try:
            await self._do(lambda: self._write(scope, record, in_flight=True))
        except BaseException:
            self._owned.discard((scope, record.id))
            raise

    async def _read(self, scope: str, response_id: str, events: bool) -> StoredResponse | None:
        key = self._key("r", scope, response_id)
        row = await self.redis.hmget(
            key, ["response", "input_items", "conversation", "created_at", "expires_at", "template"]
        )
        if row[0] is None or float(row[4]) <= time.time():
            return None
        frames: list[bytes] = []
        if events:
            template = load_template(row[5])
            for _id, fields in await self.redis.xrange(self._key("e", scope, response_id)):
                if b"d" in fields:
                    frames.extend(unpack_batch(fields[b"d"], template))
        return StoredResponse(
            id=response_id,
            response=orjson.loads(row[0]),
            input_items=orjson.loads(row[1]),
            conversation=orjson.loads(row[2]),
            created_at=float(row[3]),
            expires_at=float(row[4]),
            events=frames,
        )

    async def get(self, response_id: str, *, scope: str = "", events: bool = True) -> StoredResponse | None:
        return await self._do(lambda: self._read(scope, response_id, events))

    async def _input_items(self, scope: str, response_id: str) -> list[Json] | None:
        raw, expires_at = await self.redis.hmget(
            self._key("r", scope, response_id), ["input_items", "expires_at"]
        )
        if raw is None or float(expires_at) <= time.time():
            return None
        items: list[Json] = orjson.loads(raw)
        return items

    async def input_items(self, response_id: str, *, scope: str = "") -> list[Json] | None:
        return await self._do(lambda: self._input_items(scope, response_id))

    async def _remove(self, scope: str, response_id: str) -> bool:
        key = self._key("r", scope, response_id)
        raw = await self.redis.hmget(key, ["response", "input_items"])
        if raw[0] is None:
            return False
        record = StoredResponse(response_id, orjson.loads(raw[0]), orjson.loads(raw[1]), [], 0.0, 0.0)
        stale = []
        for item in indexed_items(record):  # only the index entries that still point here
            stale.append(self._key("i", scope, item["id"]))
            if isinstance(item.get("call_id"), str):
                stale.append(self._key("c", scope, item["call_id"]))
        owners = await self.redis.mget(stale) if stale else []
        mine = [
            k for k, v in zip(stale, owners, strict=True) if v and orjson.loads(v).get("r") == response_id
        ]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key, *mine)
            pipe.xadd(self._key("e", scope, response_id), {"end": 1}, id="*")  # ends followers
            pipe.delete(self._key("e", scope, response_id), self._key("lease", scope, response_id))
            pipe.srem(self._running, f"{scope}:{response_id}")
            result = await pipe.execute()
        return bool(result[0])

    async def delete(self, response_id: str, *, scope: str = "") -> bool:
        deleted = await self._do(lambda: self._remove(scope, response_id))
        self._owned.discard((scope, response_id))
        return deleted

    async def _find(self, kind: str, scope: str, name: str, type_: str | None) -> Json | None:
        raw = await self.redis.get(self._key(kind, scope, name))
        if raw is None:
            return None
        entry = orjson.loads(raw)
        item: Json = entry["item"]
        if type_ is not None and item.get("type") != type_:
            return None
        if not await self.redis.exists(self._key("r", scope, entry["r"])):
            return None  # its response was deleted
        return item

    async def find_item(self, item_id: str, *, scope: str = "") -> Json | None:
        return await self._do(lambda: self._find("i", scope, item_id, None))

    async def find_call(self, call_id: str, *, scope: str = "") -> Json | None:
        return await self._do(lambda: self._find("c", scope, call_id, "function_call"))

    async def purge_expired(self) -> int:
        return 0  # every key carries its own expiry

    # -- runs ------------------------------------------------------------------------------

    async def _append(self, scope: str, response_id: str, first_seq: int, frames: list[bytes]) -> None:
        key = self._key("r", scope, response_id)
        template_blob, next_seq, expires_at = await self.redis.hmget(
            key, ["template", "next_seq", "expires_at"]
        )
        if next_seq is None:
            raise KeyError(f"no stored run {response_id!r} in this scope")
        if first_seq != int(next_seq):
            raise ValueError(
                f"frames of {response_id} must follow {int(next_seq) - 1}, got first_seq={first_seq}"
            )
        blob = pack_batch(frames, load_template(template_blob))
        stream = self._key("e", scope, response_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(stream, {"f": first_seq, "d": blob}, id=f"{first_seq + len(frames)}-0")
            pipe.hset(key, "next_seq", first_seq + len(frames))
            pipe.pexpireat(stream, _ms(float(expires_at)))
            await pipe.execute()

    async def append_events(
        self, response_id: str, first_seq: int, frames: list[bytes], *, scope: str = ""
    ) -> None:
        if frames:
            await self._do(lambda: self._append(scope, response_id, first_seq, list(frames)))

    async def update_run(self, response_id: str, response: Json, *, scope: str = "") -> None:
        key = self._key("r", scope, response_id)

        async def update() -> None:
            if await self.redis.hget(key, "in_flight") == b"1":
                await self.redis.hset(key, "response", orjson.dumps(response))

        await self._do(update)

    async def _events_after(self, scope: str, response_id: str, after: int) -> list[bytes] | None:
        template_blob = await self.redis.hget(self._key("r", scope, response_id), "template")
        if template_blob is None:
            return None
        template = load_template(template_blob)
        after = max(after, -1)
        entries = await self.redis.xrange(
            self._key("e", scope, response_id), min=f"{after + 2}-0", max="+", count=READ_BATCHES
        )
        frames: list[bytes] = []
        for _id, fields in entries:
            if b"d" in fields:
                first = int(fields[b"f"])
                frames.extend(unpack_batch(fields[b"d"], template)[max(after + 1 - first, 0) :])
        return frames

    async def events_after(self, response_id: str, after: int, *, scope: str = "") -> list[bytes] | None:
        return await self._do(lambda: self._events_after(scope, response_id, after))

    async def run_in_flight(self, response_id: str, *, scope: str = "") -> bool:
        flag = await self._do(lambda: self.redis.hget(self._key("r", scope, response_id), "in_flight"))
        return bool(flag == b"1")

    async def wait_for_events(self, response_id: str, after: int, *, scope: str = "") -> None:
        stream = self._key("e", scope, response_id)
        # Entries after `<after + 1>-0`: the batch holding frame after + 1, or the end marker.
        await self._do(lambda: self.redis.xread({stream: f"{max(after, -1) + 1}-0"}, count=1, block=BLOCK_MS))

    async def request_cancel(self, response_id: str, *, scope: str = "") -> bool:
        if not await self.run_in_flight(response_id, scope=scope):
            return False
        if (scope, response_id) in self._owned:
            if self.on_cancel is not None:
                self.on_cancel(scope, response_id)
            return True
        member = f"{scope}:{response_id}"

        async def ask() -> None:
            await self.redis.set(self._key("cancel", scope, response_id), "1", px=_ms(self.lease_seconds * 3))
            await self.redis.publish(self._channel, member)

        await self._do(ask)
        return True

    def _cancel_local(self, member: str) -> None:
        scope, _, response_id = member.rpartition(":")
        if (scope, response_id) in self._owned and self.on_cancel is not None:
            self.on_cancel(scope, response_id)

    async def _watch_cancels(self) -> None:
        """Cancel requests published by other replicas, at once (the lease loop re-checks flags)."""
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    self._subscribed.set()
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message is not None and message.get("type") == "message":
                            self._cancel_local(message["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away: the lease loop logs it; listen again later
                await asyncio.sleep(self.renew_seconds)

    async def _keep_leases(self) -> None:
        sweep_every = max(1, round(self.lease_seconds / self.renew_seconds / 2))
        rounds = 0
        while True:
            await asyncio.sleep(self.renew_seconds)
            try:
                await self._renew()
                rounds += 1
                if rounds % sweep_every == 0:
                    await self.recover_in_flight()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("renewing run leases in Redis failed; retrying", exc_info=True)

    async def _renew(self) -> None:
        owned = sorted(self._owned)
        if not owned:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for scope, rid in owned:
                pipe.set(self._key("lease", scope, rid), self.replica, px=_ms(self.lease_seconds))
            for scope, rid in owned:
                pipe.get(self._key("cancel", scope, rid))
            results = await pipe.execute()
        for (scope, rid), flag in zip(owned, results[len(owned) :], strict=True):
            if flag is not None:
                self._cancel_local(f"{scope}:{rid}")

    async def abandon_run(self, response_id: str, *, scope: str = "", error: Json | None = None) -> None:
        # Drop the lease, then fail the run as any replica's sweep would (at once, not a sweep
        # later). The lease is renewed until then: a sweep must not fail it with another code.
        code, message = lost_error(error)

        async def abandon() -> bool:
            await self.redis.delete(self._key("lease", scope, response_id))
            try:
                return await self._mark_lost(scope, response_id, code, message)
            except WatchError:  # changed meanwhile; without a lease, a sweep fails it if need be
                return False

        abandoned = await self._do(abandon)
        self._owned.discard((scope, response_id))
        if abandoned:
            log.warning("response %s could not be finished: marked failed", response_id)

    async def _mark_lost(
        self, scope: str, response_id: str, code: str = "owner_lost", message: str | None = None
    ) -> bool:
        key, lease = self._key("r", scope, response_id), self._key("lease", scope, response_id)
        stream = self._key("e", scope, response_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(key, lease)
            if await pipe.exists(lease):
                return False
            response, template, next_seq, in_flight = await pipe.hmget(
                key, ["response", "template", "next_seq", "in_flight"]
            )
            if response is None or in_flight != b"1":
                pipe.multi()
                pipe.srem(self._running, f"{scope}:{response_id}")
                await pipe.execute()
                return False
            failed = failed_snapshot(orjson.loads(response), code, message)
            seq = int(next_seq or 0)
            frames = self.lost_run_frames(failed, seq) if self.lost_run_frames is not None else []
            pipe.multi()
            if frames:
                blob = pack_batch(frames, load_template(template))
                pipe.xadd(stream, {"f": seq, "d": blob}, id=f"{seq + len(frames)}-0")
            pipe.xadd(stream, {"end": 1}, id=f"{seq + len(frames)}-1")
            pipe.hset(
                key,
                mapping={"response": orjson.dumps(failed), "in_flight": "0", "next_seq": seq + len(frames)},
            )
            pipe.srem(self._running, f"{scope}:{response_id}")
            await pipe.execute()
            return True

    async def recover_in_flight(self) -> int:
        """Fail the runs in flight whose owner's lease expired (one pipelined check for all)."""

        async def candidates() -> list[tuple[str, str]]:
            runs = []
            for raw in await self.redis.smembers(self._running):
                scope, _, response_id = raw.decode().rpartition(":")
                if (scope, response_id) not in self._owned:
                    runs.append((scope, response_id))
            if not runs:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for scope, response_id in runs:
                    pipe.exists(self._key("lease", scope, response_id))
                leased = await pipe.execute()
            return [run for run, alive in zip(runs, leased, strict=True) if not alive]

        lost = 0
        for scope, response_id in await self._do(candidates):
            try:
                if await self._do(lambda s=scope, r=response_id: self._mark_lost(s, r)):  # type: ignore[misc]
                    lost += 1
                    log.warning("response %s lost its replica: marked failed", response_id)
            except WatchError:
                continue  # its owner or another replica changed it meanwhile
        return lost
