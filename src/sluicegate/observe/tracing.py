"""OpenTelemetry traces: a span per request, with the GenAI semantic conventions, and child spans
for what a request waits on (upstream calls, tool rounds, tool calls).

Off by default: nothing of OpenTelemetry is imported and every hook is one `is None` test, so
a server without tracing pays nothing measurable (`bench/tracing.py`). `[tracing] exporter` in
the config, or the standard `OTEL_TRACES_EXPORTER` (`otlp`, `console`), turns it on;
`OTEL_SDK_DISABLED=true` keeps it off (config.py reads them). The OTLP exporter reads the
standard `OTEL_EXPORTER_OTLP_*` variables; `[tracing] endpoint` sets the traces endpoint.

Spans are started with an explicit parent rather than made "current": a turn's events run in
async generators, where attaching and detaching a context across `yield`s is unsafe. The
request's span lives on its `RequestObserver` (found through the observer's context variable,
which stream tasks copy), and so does the span new children should hang from (`parent`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

EXPORTERS = ("otlp", "console", "none")
OTLP_EXTRA = "pip install 'sluicegate[otlp]'"


@dataclass(slots=True, frozen=True)
class TracingConfig:
    """`[tracing]`: `exporter` "none" is off; `endpoint` the OTLP/HTTP traces URL (default: the
    exporter's own, from `OTEL_EXPORTER_OTLP_*`); `sample_ratio` of requests traced."""

    exporter: str = "none"
    endpoint: str | None = None
    service_name: str = "sluicegate"
    sample_ratio: float = 1.0


_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def enabled() -> bool:
    return _tracer is not None


def configure(config: TracingConfig) -> None:
    """Install the tracer this process uses (once per server process: each worker calls it).
    Raises ValueError with what to do when the exporter cannot be built."""
    if config.exporter == "none":
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter: SpanExporter
    if config.exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ValueError(f"the OTLP trace exporter is not installed: {OTLP_EXTRA}") from exc
        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else OTLPSpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name}),
        sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use_provider(provider)


def use_provider(provider: TracerProvider | None) -> None:
    """Trace through `provider` (None: stop tracing). Tests hand in one with an in-memory exporter."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("sluicegate")


def shutdown() -> None:
    """Export what is pending and stop tracing; called when the server stops."""
    if _provider is not None:
        _provider.shutdown()
    use_provider(None)


# --- spans -------------------------------------------------------------------------------------

# The GenAI operation each generating route performs (`gen_ai.operation.name`).
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/messages": "chat",
    "/api/v1/chat": "chat",
    "/api/chat": "chat",
    "/api/generate": "generate_content",
    "/v1/completions": "text_completion",
    "/completions": "text_completion",
    "/infill": "text_completion",
    "/v1/embeddings": "embeddings",
    "/api/v0/embeddings": "embeddings",
    "/api/embed": "embeddings",
    "/api/embeddings": "embeddings",
}


def operation_of(path: str) -> str | None:
    return OPERATIONS.get(path)


def start_request_span(method: str, path: str, headers: Iterable[tuple[bytes, bytes]]) -> Span | None:
    """The span of one HTTP request (None when tracing is off), continuing the client's trace
    when its request carries a `traceparent`."""
    tracer = _tracer
    if tracer is None:
        return None
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name in (b"traceparent", b"tracestate")
    }
    return tracer.start_span(
        f"{method} {path}",
        context=extract(carrier) if carrier else None,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method, "url.path": path},
    )


def start_child(
    parent: Span, name: str, *, client: bool = False, attributes: Mapping[str, Any] | None = None
) -> Span:
    """A span under `parent` (`client`: a call to another service, e.g. an upstream)."""
    assert _tracer is not None, "children are only made under a request's span"
    from opentelemetry.trace import SpanKind, set_span_in_context

    return _tracer.start_span(
        name,
        context=set_span_in_context(parent),
        kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
        attributes=dict(attributes or {}),
    )


def end(span: Span, *, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    """End `span`, marking it failed with `error` (an error type or code) when given."""
    if attributes:
        span.set_attributes(dict(attributes))
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def traceparent_header(span: Span) -> bytes:
    """The W3C trace-context header lines for a request sent on `span`'s behalf."""
    from opentelemetry.propagate import inject
    from opentelemetry.trace import set_span_in_context

    carrier: dict[str, str] = {}
    inject(carrier, context=set_span_in_context(span))
    return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in carrier.items())
