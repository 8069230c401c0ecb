"""What every upstream engine shares: replicas, failover, timeouts, the HTTP client, relaying.

Per request: `PromptStarted` as the request goes out; the least busy replica is asked, and a
connection failure or a 5xx before the answer moves on to the next replica; `Answered` (naming
the replica) once one accepted; `PromptFinished` with the first generated output (after any
prompt progress the upstream reports); then the decoded stream. Closing the stream (client
gone, timeout) closes the upstream connection at once, which is how upstreams learn to stop
generating.

A subclass says only what differs between wire formats: the path, the request body, the
stream decoder, and how its credentials are sent (`openai`: engine.py, `anthropic`:
anthropic_engine.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import orjson

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.events import (
    Answered,
    Failed,
    RawBatch,
    RawEvent,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ChatRequest
from sluicegate.core.tasks import task_of
from sluicegate.engines.base import Discovery, Engine, ModelInfo
from sluicegate.engines.lane import Held, Lane
from sluicegate.engines.upstream.config import Auth, UpstreamConfig, parse_config
from sluicegate.engines.upstream.discovery import UpstreamDiscovery
from sluicegate.engines.upstream.http import StreamingResponse
from sluicegate.engines.upstream.relay import REPLICA_HEADER, Relay, StreamDecoder
from sluicegate.engines.upstream.replicas import Replica, ReplicaSet
from sluicegate.engines.upstream.sending import send
from sluicegate.engines.upstream.timeouts import Clocks
from sluicegate.observe import tracing
from sluicegate.observe.requests import current as current_observer

log = logging.getLogger(__name__)

DRAIN_SECONDS = 0.05  # how long the end of a body may take after its last event before we hang up


async def _drain(read: Callable[[], Awaitable[bytes | None]]) -> None:
    """Read the body's end after its last event (it is normally there already), so the
    connection goes back to the pool instead of being closed; an upstream that keeps it open is
    cut off."""

    # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the read in a task of its own.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_SECONDS):
            while await read() is not None:
                pass


class UpstreamEngine(Engine):
    answers_first: ClassVar[bool] = True
    default_max_concurrency: ClassVar[int] = 0  # no cap: the upstream batches (issue 16)
    auth: ClassVar[Auth] = "bearer"
    path: ClassVar[str]  # relative to each base URL, e.g. "/chat/completions"

    def __init__(self, config: UpstreamConfig, replicas: ReplicaSet | None = None) -> None:
        super().__init__(config.model_id)
        self.config = config
        self.replicas = replicas or ReplicaSet(config)
        self._owns_replicas = replicas is None  # discovered models share their table's replicas

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> UpstreamEngine:
        return cls(parse_config(table, auth=cls.auth))

    @classmethod
    def discovery(cls, table: dict[str, Any], base_dir: Path) -> Discovery | None:
        config = parse_config(table, auth=cls.auth)
        return UpstreamDiscovery(config, cls) if config.discover else None

    @abstractmethod
    def request_body(self, request: ChatRequest) -> bytes:
        """The upstream's streaming request for `request`, serialised."""

    @abstractmethod
    def decoder(self) -> StreamDecoder:
        """A fresh decoder for one response stream."""

    def route(self, request: ChatRequest) -> tuple[str, StreamDecoder]:
        """Where `request` goes and its stream's decoder: `path` and `decoder()`, unless an
        engine sends some requests elsewhere (a text completion: `/completions`)."""
        return self.path, self.decoder()

    def info(self) -> ModelInfo:
        return ModelInfo(
            id=self.model_id,
            engine=self.kind,
            created=self.created,
            owned_by="upstream",
            context_length=self.config.context_length,
            capabilities=self.config.capabilities,
        )

    async def start(self) -> None:
        if self._owns_replicas:
            self.replicas.start()

    async def aclose(self) -> None:
        if self._owns_replicas:
            await self.replicas.aclose()

    def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        return self.generate_through(request, None)

    def generate_through(
        self, request: ChatRequest, lane: Lane | None, held: Held | None = None
    ) -> AsyncIterator[RawEvent]:
        """`generate`, offering reads that arrive while the stream's task waits to `lane` (a
        stream's fast lane, engines/lane.py); a traced call keeps every read on its task.
        `held`: the instance's part, ended here (one coroutine for both, see `Held`)."""
        observer = current_observer()
        parent = observer.parent_span if observer is not None else None
        if parent is None:  # tracing off (or no request to trace): no layer, no cost
            return Relay(self, request, b"", lane, held, _drain)
        span = tracing.start_child(
            parent,
            f"chat {self.config.upstream_model}",
            client=True,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self.kind,
                "gen_ai.request.model": self.config.upstream_model,
            },
        )
        return _traced(Relay(self, request, tracing.traceparent_header(span), None, held, _drain), span)

    async def exchange(self, path: str, body: bytes, *, max_bytes: int) -> tuple[Any, str]:
        """One non-streamed request (embeddings): (the answer's JSON, the replica that gave it),
        under the same replica failover and clocks as a chat stream. A refusal, a timeout, a
        broken, oversized or non-JSON answer raises a `SluicegateError` (502/504, never a 500);
        a caller cancelled (the client left) closes the upstream connection at once."""
        data = bytearray()
        async with contextlib.aclosing(self.answer(path, body)) as answer:
            async for replica, chunk in answer:
                data += chunk
                if len(data) > max_bytes:
                    raise _bad_answer(replica, f"its answer is larger than {max_bytes} bytes")
        try:
            return orjson.loads(data), replica.name
        except orjson.JSONDecodeError as exc:
            raise _bad_answer(replica, f"its answer is not JSON ({exc.msg})") from exc

    async def answer(
        self, path: str, body: bytes, *, content_type: bytes = b"application/json"
    ) -> AsyncGenerator[tuple[Replica, bytes], None]:
        """One request's answer, its body's bytes as they arrive, each with the replica giving
        it (first `(replica, b"")`, as soon as its head is in), under the replica failover and
        clocks of a chat stream; a refusal, a timeout or a broken body raises a
        `SluicegateError`; closing the generator (a caller that left) closes the connection."""
        clocks = Clocks(
            first_byte=self.config.first_byte_timeout,
            idle=self.config.idle_timeout,
            total=self.config.total_timeout,
        )
        replica: Replica | None = None
        response: StreamingResponse | None = None
        try:
            try:
                replica, response, refusal = await send(
                    self.replicas, self.model_id, path, body, clocks, content_type=content_type
                )
            except asyncio.CancelledError:
                if not clocks.owns(task_of(asyncio.get_running_loop())):
                    raise
                refusal = clocks.expired
            if refusal is not None:
                raise SluicegateError(refusal.kind, refusal.message, param=refusal.param, code=refusal.code)
            assert replica is not None and response is not None
            yield replica, b""
            read = response.read
            while True:
                if clocks.expired is not None:
                    info = clocks.expired
                    raise SluicegateError(info.kind, info.message, code=info.code)
                try:
                    chunk = await clocks.read(read)
                except Exception as exc:  # the connection broke mid-body
                    raise _bad_answer(replica, f"the connection broke: {exc or type(exc).__name__}") from exc
                if type(chunk) is not bytes:
                    if chunk is None:
                        break
                    continue  # a limit passed (`expired`): the loop's top reports it
                yield replica, chunk
            clocks.idle()
        finally:
            clocks.stop()
            if response is not None:
                await response.aclose()
            if replica is not None:
                replica.outstanding -= 1


def _bad_answer(replica: Replica, what: str) -> SluicegateError:
    return SluicegateError(
        ErrorKind.UPSTREAM, f"The upstream {replica.name} failed: {what}.", code="upstream_error"
    )


async def _traced(events: AsyncIterator[RawEvent], span: Any) -> AsyncIterator[RawEvent]:
    """Pass an upstream call's events through, ending its span with what the call came to."""
    error: str | None = None
    usage: Usage | None = None
    attributes: dict[str, Any] = {}
    try:
        async for event in events:
            for seen in event.events if type(event) is RawBatch else (event,):
                if type(seen) is UsageReport:
                    usage = seen.usage
                elif type(seen) is Failed:
                    error = seen.error.code or seen.error.kind.value
                elif type(seen) is Answered:
                    attributes["sluicegate.replica"] = seen.headers.get(REPLICA_HEADER, "")
            yield event
    except BaseException as exc:
        error = error or type(exc).__name__
        raise
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        tracing.end(span, error=error, attributes=attributes)
