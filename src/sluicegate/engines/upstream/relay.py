"""One upstream chat stream, relayed: the request out, the answer's reads decoded into raw events.

`Relay` is the engine's stream (`UpstreamEngine.generate`): `PromptStarted` and its progress as
the request goes out, `Answered` (naming the replica) once one accepted, `PromptFinished` with
the first generated output, then one step per upstream read (a `RawBatch` when a read decoded
more than one event). It is an async iterator object, not an async generator, so that mypyc
compiles it (`_compiled.py`): with the upstream client and its clocks below it compiled too, a
start's awaits run no interpreted frame between the stream's consumer and the socket.

What an async generator's `finally` did is `_over`, run once on every path: the end of the
stream, an exception out of a step (a cancel: the client left), or `aclose()` (its owner, the
instance's generation or the turn, closing it early). Closing it never started releases
nothing (nothing was taken): the instance gives its slot back itself then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Answered,
    Failed,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawBatch,
    RawEvent,
    ReadyEvents,
)
from sluicegate.core.request import ChatRequest
from sluicegate.core.tasks import task_of
from sluicegate.engines.lane import Held, Lane
from sluicegate.engines.upstream.http import StreamingResponse
from sluicegate.engines.upstream.replicas import Replica
from sluicegate.engines.upstream.sending import send
from sluicegate.engines.upstream.timeouts import Clocks
from sluicegate.engines.upstream.wire import SSEReader, StreamEnding

if TYPE_CHECKING:
    from sluicegate.engines.upstream.base import UpstreamEngine

log = logging.getLogger(__name__)

REPLICA_HEADER = "X-Sluicegate-Replica"

# Where a relay is: each step (`__anext__`) goes on from here.
_START = 0  # not started: the request body is not made yet
_SEND = 1  # `PromptStarted` handed out: the request goes out at the next step
_READ = 2  # answered: one upstream read per step
_ENDING = 3  # no event more: the next step releases what is held and stops
_OVER = 4  # released (`_over` ran)


# One upstream stream's state: SSE frames in, raw events out (wire.py's `ChunkDecoder`,
# anthropic_wire.py's `MessagesDecoder`). Their common base class, not a protocol: compiled,
# a method of a protocol is a generic call (its arguments parsed) per read, of a base class a
# native one.
StreamDecoder = StreamEnding


Drain = Callable[[Callable[[], Awaitable[bytes | None]]], Awaitable[None]]


class Relay(ReadyEvents):
    """The engine's stream of one chat request (see the module's docstring). `lane`: a stream's
    fast lane, offered the reads that arrive while the stream's task waits; `held`: the
    instance's part, ended here, last, on every path (`engines/lane.py`); `drain`: reads the
    body's end after its last event (base.py's `_drain`)."""

    __slots__ = (
        "_body",
        "_clocks",
        "_decoder",
        "_drain",
        "_engine",
        "_held",
        "_lane",
        "_path",
        "_pending",
        "_pinned",
        "_prompting",
        "_read_over",
        "_reader",
        "_replica",
        "_request",
        "_response",
        "_state",
        "_through",
        "_trace_headers",
    )

    def __init__(
        self,
        engine: UpstreamEngine,
        request: ChatRequest,
        trace_headers: bytes,
        lane: Lane | None,
        held: Held | None,
        drain: Drain,
    ) -> None:
        self._engine = engine
        self._request: ChatRequest | None = request
        self._trace_headers = trace_headers
        self._lane = lane
        self._held = held
        self._drain = drain
        self._state = _START
        self._pending: list[RawEvent] = []  # what a step decided beyond the event it returned
        self._body = b""
        self._path = ""
        self._clocks: Clocks | None = None
        self._decoder: StreamDecoder | None = None
        self._replica: Replica | None = None
        self._response: StreamingResponse | None = None
        self._pinned: list[int] = []  # the llama-server slot named (prefix_affinity), until the end
        self._reader = SSEReader()
        self._prompting = True  # until the first generated event (llama-server reports progress first)
        self._through: ReadThrough | None = None
        self._read_over = False  # a read's events were passed on: did the stream end with them?

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> RawEvent:
        pending = self._pending
        if pending:
            return pending.pop(0)
        state = self._state
        if state >= _ENDING:
            if state == _ENDING:
                self._over(False)
            raise StopAsyncIteration
        event: RawEvent | None
        try:
            if state == _READ:
                # One upstream read's events (a `RawBatch` when more than one), or the stream's
                # last: inlined, a coroutine less per read.
                clocks, decoder, response = self._clocks, self._decoder, self._response
                assert clocks is not None and decoder is not None and response is not None
                read = response.read
                feed, frame = self._reader.feed, decoder.frame
                lane = self._lane
                while True:
                    if self._read_over:
                        self._read_over = False
                        if decoder.over:
                            # The body's end normally came with the last event: no timer to wait for it.
                            if decoder.done and not response.received:
                                await self._drain(read)
                            event = None
                            break
                    if clocks.expired is not None:
                        event = self._hand(decoder.cut(clocks.expired))
                        break
                    # Once the stream's transport has bound the lane (a transport that never does, the
                    # Responses WebSocket's, keeps every read on this loop).
                    through = self._through
                    if (
                        through is None
                        and lane is not None
                        and lane.carrier is not None
                        and not self._prompting
                    ):
                        through = self._through = ReadThrough(lane, self._reader, decoder, clocks)
                        response.read_through(through)
                    try:
                        chunk = await clocks.read(read)
                    except Exception as exc:  # the connection broke mid-body
                        error = ErrorInfo(
                            ErrorKind.UPSTREAM, f"The upstream connection broke: {exc or type(exc).__name__}"
                        )
                        ending: list[RawEvent] = []
                        if through is not None and through.stash:
                            ending.append(RawBatch(through.take()))
                        event = self._hand([*ending, *decoder.cut(error)])
                        break
                    if type(chunk) is not bytes:
                        if chunk is None:  # the body's end
                            event = self._end()
                            break
                        if through is not None and through.stash:  # what came before the timeout first
                            event = RawBatch(through.take())
                            break
                        continue  # a limit passed (`expired`): the loop's top reports it
                    # Everything this read decoded goes down as one: a RawBatch when it is more than
                    # one event, so the layers above take one step per read, not one per token.
                    batch: list[RawEvent] = []
                    if through is not None and through.stash:  # decoded by the fast lane, not carried
                        batch = through.take()
                    for name, data in feed(chunk):
                        batch += frame(name, data)
                    if self._prompting and batch:
                        for i, seen in enumerate(batch):
                            if type(seen) is not PromptProgress:
                                self._prompting = False
                                batch[i:i] = (PromptProgress(1.0), PromptFinished())
                                break
                    self._read_over = True
                    if len(batch) == 1:
                        event = batch[0]
                        break
                    if batch:
                        event = RawBatch(batch)
                        break
            elif state == _SEND:
                event = await self._send()
            else:
                event = self._start()
        except BaseException as exc:
            # A cancel (the client left) or a bug: released as the generator's `finally` did.
            self._over(isinstance(exc, asyncio.CancelledError))
            raise
        if event is None:
            self._over(False)
            raise StopAsyncIteration
        return event

    def ready(self) -> RawEvent | None:
        """The next event when it needs no wait (`ReadyEvents`): what a step decided beyond the
        event it returned, or the start's (the request body made, `PromptStarted`); else None."""
        pending = self._pending
        if pending:
            return pending.pop(0)
        if self._state != _START:
            return None
        try:
            return self._start()  # None: the stream ended at once; `__anext__` says so
        except BaseException:
            self._over(False)
            raise

    async def aclose(self) -> None:
        """Its owner is done with it: what it holds is released (once; nothing if never started)."""
        if self._state == _START:
            self._state = _OVER
            return
        self._over(True)

    def _hand(self, events: list[RawEvent]) -> RawEvent | None:
        """The last events of the stream: the first now, the rest at the next steps."""
        self._state = _ENDING
        if not events:
            return None
        self._pending = events[1:]
        return events[0]

    def _start(self) -> RawEvent | None:
        engine, request = self._engine, self._request
        assert request is not None
        try:
            self._body = engine.request_body(request)
        except orjson.JSONEncodeError as exc:  # an int of 2**64 or more, JSON nested 255 deep
            return self._hand(
                [Failed(ErrorInfo(ErrorKind.INVALID_REQUEST, f"The request cannot be sent upstream: {exc}."))]
            )
        config = engine.config
        self._clocks = Clocks(
            first_byte=config.first_byte_timeout, idle=config.idle_timeout, total=config.total_timeout
        )
        self._path, self._decoder = engine.route(request)
        self._state = _SEND
        self._pending = [PromptProgress(0.0)]
        return PromptStarted()

    async def _send(self) -> RawEvent | None:
        engine, clocks, request = self._engine, self._clocks, self._request
        assert clocks is not None and request is not None
        self._request = None  # not held for the whole stream
        try:
            replicas = engine.replicas
            # [] unless routing = "prefix_affinity" (and more than one replica)
            keys = replicas.prefix_keys(request) if replicas.affinity is not None else []
            if keys:
                await replicas.recall(keys)
            replica, response, refusal = await send(
                replicas,
                engine.model_id,
                self._path,
                self._body,
                clocks,
                self._trace_headers,
                keys=keys,
                pinned=self._pinned,
            )
        except asyncio.CancelledError:
            if not clocks.owns(task_of(asyncio.get_running_loop())):
                raise
            assert clocks.expired is not None
            return self._hand([Failed(clocks.expired)])
        finally:
            self._body = b""  # an orjson result holds a 4 KiB buffer: not kept for the stream
        self._replica, self._response = replica, response
        if refusal is not None:
            return self._hand([Failed(refusal)])
        assert replica is not None and response is not None
        self._state = _READ
        return Answered({REPLICA_HEADER: replica.name})

    def _end(self) -> RawEvent | None:
        """The body's end: what the fast lane kept, the reader's last frame, the decoder's end."""
        clocks, decoder = self._clocks, self._decoder
        assert clocks is not None and decoder is not None
        clocks.idle()
        ending: list[RawEvent] = []
        through = self._through
        if through is not None and through.stash:  # the body ended right after them
            ending.append(RawBatch(through.take()))
        for name, data in self._reader.close():
            ending += decoder.frame(name, data)
        ending += decoder.end()
        return self._hand(ending)

    def _over(self, cancelled: bool) -> None:
        """Release, once, on every path: the clocks, the upstream connection (closing it is how an
        upstream learns to stop), the replica's count and pinned slot, then the instance's part.
        Nothing in it waits: a plain call, not a coroutine."""
        if self._state == _OVER:
            return
        self._state = _OVER
        self._pending = []
        try:
            clocks = self._clocks
            if clocks is not None:
                clocks.stop()
            response = self._response
            if response is not None:
                self._response = None
                response.release()
            replica = self._replica
            if replica is not None:
                self._replica = None
                replica.outstanding -= 1
                for slot in self._pinned:
                    self._engine.replicas.unpin(replica, slot)
        finally:
            held = self._held
            if held is not None:  # the instance's part, after the upstream's is released
                self._held = None
                held.end(cancelled)


class ReadThrough:
    """A read that arrives while the relay waits, decoded in the connection's callback and
    offered to the turn's fast lane (engines/lane.py); what the lane does not carry, and what ends
    the stream, is kept in `stash` for the relay, which is woken to take it first."""

    __slots__ = ("clocks", "decoder", "lane", "reader", "stash")

    def __init__(self, lane: Lane, reader: SSEReader, decoder: StreamDecoder, clocks: Clocks) -> None:
        self.lane = lane
        self.reader = reader  # the relay's own (a native call, not a bound method's)
        self.decoder = decoder
        self.clocks = clocks
        self.stash: list[RawEvent] = []

    def __call__(self, data: bytes) -> bool:
        try:
            frames = self.reader.feed(data)
            if len(frames) == 1:  # a paced token's read: the decoder's list as it is
                name, payload = frames[0]
                batch = self.decoder.frame(name, payload)
            else:
                batch = []
                for name, payload in frames:
                    batch += self.decoder.frame(name, payload)
            now = self.clocks.alive()
            if not batch:
                return True
            carrier = self.lane.carrier
            if (
                carrier is not None
                and not self.decoder.over
                and self.clocks.expired is None
                and carrier.carry(batch, self.clocks.waiter, now)
            ):
                return True
        except Exception:  # a bug in a callback of the event loop: end the stream, not the process
            log.exception("relaying an upstream read failed")
            batch = [Failed(ErrorInfo(ErrorKind.INTERNAL, "The server failed while relaying the upstream."))]
        self.stash += batch
        return False

    def take(self) -> list[RawEvent]:
        stash, self.stash = self.stash, []
        return stash
