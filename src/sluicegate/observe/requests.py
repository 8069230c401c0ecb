"""Per-request observation: metrics (TTFT, inter-token, end-to-end, tokens, tool calls) and the
one access-log line, from one object per HTTP request.

- `ObserveMiddleware` (ASGI) makes a `RequestObserver` per request, keeps it in a context
  variable for everything the request runs (tasks it starts copy the context), notes the
  response status, and calls `end()` after the last byte: that records the end-to-end
  histogram and writes the access line.
- Whoever runs a turn reports generation progress: `first_token()`, `token()`, `usage()`,
  `tool_result()`, `stream_status()`; `EventTap` does it per canonical event (the stream core
  calls it: turn/stream_core.py).
- `note_model(model_id)` says which model the current request uses (metrics label).

Timings are `time.perf_counter()` seconds.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    Usage,
    UsageReport,
)
from sluicegate.core.ids import new_id
from sluicegate.core.request import ProviderInfo
from sluicegate.observe import tracing
from sluicegate.observe.metrics import METRICS, TOKEN_GAP_BUCKETS, Key
from sluicegate.observe.series import bucket

access_log = logging.getLogger("sluicegate.access")
IN_FLIGHT = "sluicegate_generations_in_flight"  # a gauge: {dialect, model}
# Its keys, one per (dialect, model) (both bounded: known names), shared by every stream
# instead of a tuple of tuples each stream builds and keeps for its life.
_IN_FLIGHT_KEYS: dict[tuple[str, str], Key] = {}

CLIENT_GONE = 499  # nginx's "client closed request": a stream the client went away from
QUIET_PATHS = frozenset({"/health", "/metrics"})  # probes and scrapes: access lines at debug only
MAX_LOGGED_TEXT = 4096  # --log-prompts: characters of the request body and of the answer kept

# A bug's answer, as Starlette's `PlainTextResponse("Internal Server Error", 500)` sends it
# (the server logs the exception; the client never sees it).
_CRASH_HEAD: Message = {
    "type": "http.response.start",
    "status": 500,
    "headers": [(b"content-length", b"21"), (b"content-type", b"text/plain; charset=utf-8")],
}
_CRASH_BODY: Message = {"type": "http.response.body", "body": b"Internal Server Error"}

_current: contextvars.ContextVar[RequestObserver | None] = contextvars.ContextVar(
    "sluicegate_request_observer", default=None
)


def no_dialect(path: str) -> str:
    """Without the app's dialect table (observe sits below dialects): no API label."""
    return ""


_GAP_SLOTS = len(TOKEN_GAP_BUCKETS) + 1
# Declared variable-length: a fixed-length tuple type is stored unboxed when compiled, and
# boxed anew (a tuple and 12 floats) each time it is passed to `bucket`.
_GAP_BOUNDS: tuple[float, ...] = TOKEN_GAP_BUCKETS


class RequestObserver:
    """What one request did; generation metrics are recorded as they happen, the rest at `end`.

    A plain class, not a dataclass: compiled, a dataclass is made through the interpreted
    `__init__` that `dataclasses` writes (~2.5 k instructions; this one has 25 fields and three
    default factories); this one's is native. One is made per request."""

    __slots__ = (
        "answer_chars",
        "answer_text",
        "cached_tokens",
        "completion_tokens",
        "dialect",
        "ended",
        "finish_reason",
        "first_token_at",
        "gap_counts",
        "gap_sum",
        "generating",
        "last_token_at",
        "log_text",
        "method",
        "model",
        "parent_span",
        "path",
        "prompt_tokens",
        "reasoning_tokens",
        "request_id",
        "request_text",
        "span",
        "started",
        "status_override",
        "tokens",
    )

    def __init__(
        self,
        dialect: str,
        method: str = "GET",
        path: str = "/",
        request_id: str = "",
        model: str = "",
        *,
        log_text: bool = False,  # --log-prompts
    ) -> None:
        self.dialect = dialect
        self.method = method
        self.path = path
        self.request_id = request_id
        self.model = model
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.tokens = 0  # streamed deltas: a fallback for the output count when no usage came
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens = 0  # of the prompt's (issued keys' usage counts them)
        self.reasoning_tokens = 0  # of the completion's
        self.status_override: int | None = None  # a stream's failure or the client going away
        self.ended = False
        self.generating = 0  # event streams still running (a background response outlives `end`)
        self.log_text = log_text
        # --log-prompts only: a stream held open without it keeps no two empty lists.
        self.request_text: list[bytes] | None = [] if log_text else None
        self.answer_text: list[str] | None = [] if log_text else None
        self.answer_chars = 0
        # Inter-token gaps, counted per histogram bucket here and added to the histogram when
        # the generation ends: a list increment per token instead of a locked observe.
        self.gap_counts = [0] * _GAP_SLOTS
        self.gap_sum = 0.0
        # Tracing (None when off): the request's span, the span new children hang from (a tool
        # round while one runs), and how the generation finished.
        self.span: Any = None
        self.parent_span: Any = None
        self.finish_reason: FinishReason | None = None  # its `.value` only for a span

    # --- generation -----------------------------------------------------------------------

    def first_token(self, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        self.first_token_at = self.last_token_at = now
        self.tokens += 1
        if self.dialect:
            METRICS.ttft.labels(self.dialect, self.model).observe(now - self.started)

    def token(self, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        last = self.last_token_at
        if last is None:
            self.first_token(now)
            return
        gap = now - last
        self.gap_counts[bucket(_GAP_BOUNDS, gap)] += 1
        self.gap_sum += gap
        self.last_token_at = now
        self.tokens += 1

    def _flush_gaps(self) -> None:
        if self.dialect and any(self.gap_counts):
            METRICS.inter_token.labels(self.dialect, self.model).observe_counts(self.gap_counts, self.gap_sum)
        self.gap_counts[:] = [0] * len(self.gap_counts)  # in place: a running tap holds the list
        self.gap_sum = 0.0

    def usage(self, usage: Usage) -> None:
        self.prompt_tokens = usage.prompt_tokens
        self.completion_tokens = usage.completion_tokens
        self.cached_tokens = usage.cached_tokens
        self.reasoning_tokens = usage.reasoning_tokens

    def tool_result(self, provider: ProviderInfo | None, error: str | None) -> None:
        name = "request" if provider is None or provider.type != "plugin" else provider.id
        METRICS.tool_calls.labels(name, "error" if error else "ok").inc()

    def stream_status(self, status: int) -> None:
        """How a stream that already answered 200 really ended (an error's status, or 499)."""
        if self.status_override is None:
            self.status_override = status

    def generation_ended(self) -> None:
        """A generation ended; one that outlived its HTTP exchange (a background response) had
        its tokens left uncounted by `end`, so they are counted now."""
        self.generating -= 1
        self._flush_gaps()
        if self.ended and not self.generating:
            out = self.completion_tokens if self.completion_tokens is not None else self.tokens
            if self.dialect:
                self._count_tokens(self.prompt_tokens or 0, out)
            if self.span is not None:
                self._end_span(self.status_override or 200, out)

    def _count_tokens(self, tokens_in: int, tokens_out: int) -> None:
        if tokens_in:
            METRICS.prompt_tokens.labels(self.dialect, self.model).inc(tokens_in)
        if tokens_out:
            METRICS.completion_tokens.labels(self.dialect, self.model).inc(tokens_out)

    # --- the end of the HTTP exchange -------------------------------------------------------

    def end(self, status: int, usage: Usage | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if usage is not None:
            self.usage(usage)
        status = self.status_override or status
        total = time.perf_counter() - self.started
        tokens_in = self.prompt_tokens or 0
        tokens_out = self.completion_tokens if self.completion_tokens is not None else self.tokens
        self._flush_gaps()
        if self.dialect:
            METRICS.requests.labels(self.dialect, self.model, str(status)).observe(total)
            if not self.generating:  # else counted when the generation ends
                self._count_tokens(tokens_in, tokens_out)
        if self.span is not None and not self.generating:  # else ended when the generation ends
            self._end_span(status, tokens_out)
        level = logging.DEBUG if self.path in QUIET_PATHS else logging.INFO
        if not access_log.isEnabledFor(level):  # what `log` would ask first; nothing built for it
            return
        ttft = None if self.first_token_at is None else self.first_token_at - self.started
        fields: dict[str, Any] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "dialect": self.dialect or None,
            "model": self.model or None,
            "status": status,
            "ttft_seconds": None if ttft is None else round(ttft, 4),
            "total_seconds": round(total, 4),
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
        }
        if self.log_text:
            fields["request_body"] = b"".join(self.request_text or ()).decode("utf-8", "replace")
            fields["answer"] = "".join(self.answer_text or ())[:MAX_LOGGED_TEXT]
        timing = f"ttft={ttft:.3f}s " if ttft is not None else ""
        tokens = f" tokens={tokens_in}/{tokens_out}" if tokens_in or tokens_out else ""
        model = f" model={self.model}" if self.model else ""
        access_log.log(
            level,
            '"%s %s" %d%s %stotal=%.3fs%s id=%s',
            self.method,
            self.path,
            status,
            model,
            timing,
            total,
            tokens,
            self.request_id,
            extra={"access": fields},
        )

    def start_span(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Trace this request (tracing is on)."""
        self.span = self.parent_span = tracing.start_request_span(self.method, self.path, headers)

    def _end_span(self, status: int, tokens_out: int) -> None:
        span, self.span = self.span, None
        operation = tracing.operation_of(self.path)
        attributes: dict[str, Any] = {"http.response.status_code": status}
        if self.request_id:
            attributes["sluicegate.request_id"] = self.request_id
        if operation:
            attributes["gen_ai.operation.name"] = operation
            if self.model:
                span.update_name(f"{operation} {self.model}")
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        if self.prompt_tokens is not None or tokens_out:
            attributes["gen_ai.usage.input_tokens"] = self.prompt_tokens or 0
            attributes["gen_ai.usage.output_tokens"] = tokens_out
        if self.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = [self.finish_reason.value]
        error = None
        if status >= 500:
            error = str(status)
        elif status == CLIENT_GONE:
            error = "client_closed_request"
        tracing.end(span, error=error, attributes=attributes)


def current() -> RequestObserver | None:
    return _current.get()


@contextlib.contextmanager
def observing(observer: RequestObserver) -> Iterator[RequestObserver]:
    """Make `observer` the current one: for a turn without an HTTP request of its own (a
    WebSocket turn); the caller ends it."""
    token = _current.set(observer)
    try:
        yield observer
    finally:
        _current.reset(token)


def note_model(model_id: str) -> None:
    """The model the current request uses (a known one: labels must stay bounded)."""
    observer = _current.get()
    if observer is not None and not observer.model:
        observer.model = model_id


class EventTap:
    """Reports a canonical stream to the current request's observer, event by event, for a
    loop that already iterates it (`TurnPipeline`): a call per event instead of a generator
    layer. `start()` when the stream starts, `see(event)` for each, `end()` once it stops."""

    __slots__ = ("_bounds", "_counts", "_in_flight", "_log_text", "_observer", "_perf", "terminal")

    def __init__(self, observer: RequestObserver) -> None:
        self._observer = observer
        self.terminal = False
        self._in_flight: Key = ("", ())
        self._perf = time.perf_counter
        self._counts = observer.gap_counts
        self._bounds = _GAP_BOUNDS
        self._log_text = observer.log_text

    @staticmethod
    def current() -> EventTap | None:
        observer = _current.get()
        return EventTap(observer) if observer is not None else None

    def start(self) -> None:
        observer = self._observer
        observer.generating += 1
        # Generations in flight by dialect and model (the overview page's first table); the
        # key is kept so the end takes off exactly what the start added.
        labels = (observer.dialect, observer.model)
        key = _IN_FLIGHT_KEYS.get(labels)
        if key is None:
            key = _IN_FLIGHT_KEYS[labels] = METRICS.key(IN_FLIGHT, dialect=labels[0], model=labels[1])
        self._in_flight = key
        METRICS.gauges[self._in_flight] += 1

    def see(self, event: Event) -> None:
        observer = self._observer
        if type(event) is ItemDelta:  # per token: `observer.token()`, inlined
            now = self._perf()
            last = observer.last_token_at
            if last is None:
                observer.first_token(now)
            else:
                gap = now - last
                self._counts[bucket(self._bounds, gap)] += 1
                observer.gap_sum += gap
                observer.last_token_at = now
                observer.tokens += 1
            if (
                self._log_text
                and event.item.kind is ItemKind.MESSAGE
                and observer.answer_chars < MAX_LOGGED_TEXT
                and observer.answer_text is not None
            ):
                observer.answer_text.append(event.text)  # bounded: only what the log keeps
                observer.answer_chars += len(event.text)
        elif isinstance(event, ItemDone):
            item = event.item
            if item.kind is ItemKind.TOOL_RESULT:
                observer.tool_result(item.provider, item.error)
            elif item.kind is ItemKind.TOOL_CALL and observer.last_token_at is None:
                observer.token()  # a call that came whole is still the first output
        elif isinstance(event, UsageReport):
            observer.usage(event.usage)
        elif isinstance(event, Failed):
            self.terminal = True
            observer.stream_status(event.error.status)
        elif isinstance(event, Finished):
            self.terminal = True
            observer.finish_reason = event.reason

    def end(self) -> None:
        if not self.terminal:
            self._observer.stream_status(CLIENT_GONE)
        METRICS.gauges[self._in_flight] -= 1
        self._observer.generation_ended()


class ObserveMiddleware:
    """One `RequestObserver` per HTTP request, ended after the response's last byte."""

    def __init__(
        self, app: ASGIApp, *, log_prompts: bool = False, dialect_of: Callable[[str], str] = no_dialect
    ) -> None:
        self.app = app
        self.log_prompts = log_prompts
        # The API a path belongs to (a metrics label): the dialect registry's, given by the app.
        self.dialect_of = dialect_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        observer = RequestObserver(
            self.dialect_of(path),
            scope["method"],
            path,
            new_id("req_", 16),
            log_text=self.log_prompts,
        )
        sent = _ObservedSend(observer, send)
        # (--log-prompts: the request's body as it is read; objects, not closures, so that the
        # call's frame has no cells)
        receive_observed: Receive = _LoggedReceive(observer, receive) if self.log_prompts else receive
        if tracing.enabled():
            observer.start_span(scope["headers"])
        token = _current.set(observer)
        try:
            await self.app(scope, receive_observed, sent)
        except BaseException as exc:
            if sent.started:  # the status line went out already; say how it really ended
                observer.stream_status(500 if isinstance(exc, Exception) else CLIENT_GONE)
            elif isinstance(exc, Exception):  # Starlette's error middleware's answer, which it
                await send(_CRASH_HEAD)  # no longer runs (app/factory.py): a plain 500
                await send(_CRASH_BODY)
            raise
        finally:
            _current.reset(token)
            observer.end(sent.status)


class _LoggedReceive:
    """The app's `receive` with --log-prompts: keeps the start of the request's body."""

    __slots__ = ("kept", "observer", "receive")

    def __init__(self, observer: RequestObserver, receive: Receive) -> None:
        self.observer = observer
        self.receive = receive
        self.kept = 0

    async def __call__(self) -> Message:
        message = await self.receive()
        body = message.get("body", b"")
        text = self.observer.request_text
        if body and self.kept < MAX_LOGGED_TEXT and text is not None:
            text.append(body[: MAX_LOGGED_TEXT - self.kept])
            self.kept += len(body)
        return message


class _ObservedSend:
    """The app's `send`: notes the response's status and `X-Request-ID` on the way out. An
    object, not a closure in the middleware's call: a held stream keeps it, and a closure with
    its four cells is ~0.3 KiB where this is 64 bytes (bench/README.md, gateway "Round fifteen")."""

    __slots__ = ("observer", "send", "started", "status")

    def __init__(self, observer: RequestObserver, send: Send) -> None:
        self.observer = observer
        self.send = send
        self.started = False
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
            # ASGI's names are lowercase (ours are); another case is still found, but only
            # a name of the right length is lowercased to check (not every name, a copy each).
            for name, value in message.get("headers", ()):
                if name == b"x-request-id" or (len(name) == 12 and name.lower() == b"x-request-id"):
                    self.observer.request_id = value.decode("latin-1")
        await self.send(message)
