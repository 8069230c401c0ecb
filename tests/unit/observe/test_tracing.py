"""OpenTelemetry traces: a request's span with the GenAI attributes, its children (a tool loop's
rounds and tool calls, an upstream call), `traceparent` both ways, and an OTLP export.

The app runs in this process (Starlette's TestClient) so the SDK's in-memory exporter sees every
span; the upstream is the fake one on loopback, the tools a real MCP server over stdio.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import FakeUpstream
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.testclient import TestClient

from mcp_fixtures import stdio_entry, write_mcp_json
from sluicegate.app.factory import create_app
from sluicegate.config import load_settings
from sluicegate.observe import tracing

SCRIPTS = Path(__file__).resolve().parents[2] / "e2e" / "scripts"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)


def app_with(tmp_path: Path, models: str, extra: str = "", env: dict[str, str] | None = None) -> TestClient:
    config = tmp_path / "sluicegate.toml"
    config.write_text(f'[server]\ndata_dir = "data"\n\n{extra}\n{models}')
    return TestClient(create_app(load_settings(config, env=env or {})))


def scripted(model: str, script: str) -> str:
    return f'[[models]]\nid = "{model}"\nengine = "scripted"\nscript = "{SCRIPTS / script}"\n'


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_chat_is_one_server_span_with_the_genai_attributes(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    with app_with(tmp_path, scripted("echo", "echo.yaml")) as client:
        answer = client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hello there"}], "stream": True},
            headers={"traceparent": CLIENT_TRACEPARENT},
        )
        assert answer.status_code == 200
    (span,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert span.name == "chat echo"
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "echo"
    assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["http.response.status_code"] == 200
    # The client's trace goes on: same trace id, the client's span as parent.
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert parent_id(span) == int("00f067aa0ba902b7", 16)


def test_an_error_answer_marks_the_span_failed_only_for_server_faults(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    with app_with(tmp_path, scripted("echo", "echo.yaml")) as client:
        assert client.post("/v1/chat/completions", json={"model": "nope", "messages": []}).status_code in (
            400,
            404,
        )
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is not StatusCode.ERROR  # a client's mistake is not our fault
    assert dict(span.attributes or {})["http.response.status_code"] in (400, 404)


def test_a_tool_loop_turn_has_a_span_per_round_and_per_tool_call(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    mcp_json = write_mcp_json(tmp_path, {"calc": stdio_entry()})
    with app_with(
        tmp_path, scripted("tools", "tools.yaml"), f'[tools]\nmcp_config = "{mcp_json}"\n'
    ) as client:
        answer = client.post(
            "/v1/chat/completions",
            json={
                "model": "tools",
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            },
        )
        assert answer.status_code == 200, answer.text
        assert "light rain" in answer.json()["choices"][0]["message"]["content"]
    found = by_name(spans)
    request, first, second = found["chat tools"], found["tool_round 1"], found["tool_round 2"]
    call = found["execute_tool get_weather"]
    assert parent_id(first) == parent_id(second) == request.context.span_id
    assert parent_id(call) == first.context.span_id  # the call ran in round 1
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "get_weather"
    assert attributes["sluicegate.tool.provider"] == "mcp/calc"
    assert call.status.status_code is not StatusCode.ERROR
    assert {s.context.trace_id for s in (request, first, second, call)} == {request.context.trace_id}


def test_an_upstream_call_is_a_client_span_and_carries_traceparent(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    with FakeUpstream() as upstream:
        model = (
            f'[[models]]\nid = "up"\nengine = "openai"\nbase_url = "{upstream.base_url}"\n'
            'upstream_model = "fake-model"\n'
        )
        with app_with(tmp_path, model) as client:
            answer = client.post(
                "/v1/chat/completions", json={"model": "up", "messages": [{"role": "user", "content": "hi"}]}
            )
            assert answer.status_code == 200, answer.text
        (sent,) = upstream.chat_requests()
    found = by_name(spans)
    request, call = found["chat up"], found["chat fake-model"]
    assert call.kind is SpanKind.CLIENT and parent_id(call) == request.context.span_id
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "fake-model"
    assert attributes["sluicegate.replica"]
    version, trace_id, span_id, _flags = sent.headers["traceparent"].split("-")
    assert version == "00"
    assert int(trace_id, 16) == request.context.trace_id
    assert int(span_id, 16) == call.context.span_id  # the upstream's parent is our client span


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        _Receiver.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_spans_reach_an_otlp_receiver(tmp_path: Path) -> None:
    receiver = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{receiver.server_port}/v1/traces"
    try:
        tracing_table = f'[tracing]\nexporter = "otlp"\nendpoint = "{endpoint}"\nservice_name = "sg-test"\n'
        with app_with(tmp_path, scripted("echo", "echo.yaml"), tracing_table) as client:
            answer = client.post(
                "/v1/chat/completions",
                json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 200
        # Leaving the app's lifespan shut the provider down, which exports what was pending.
        assert _Receiver.bodies, "the OTLP receiver got nothing"
        names = []
        for body in _Receiver.bodies:
            export = ExportTraceServiceRequest.FromString(body)
            for resource in export.resource_spans:
                service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
                assert service == "sg-test"
                names += [span.name for scope in resource.scope_spans for span in scope.spans]
        assert "chat echo" in names
    finally:
        tracing.use_provider(None)
        receiver.shutdown()


def test_otel_variables_turn_tracing_on_and_off(tmp_path: Path) -> None:
    config = tmp_path / "sluicegate.toml"
    config.write_text('[tracing]\nexporter = "console"\n')
    assert load_settings(config, env={}).tracing_exporter == "console"
    assert load_settings(config, env={"OTEL_SDK_DISABLED": "true"}).tracing_exporter == "none"
    assert load_settings(None, env={"OTEL_TRACES_EXPORTER": "otlp"}).tracing_exporter == "otlp"
    assert load_settings(None, env={"OTEL_SERVICE_NAME": "x"}).tracing_service_name == "x"
    assert load_settings(None, env={}).tracing_exporter == "none"


def test_without_tracing_no_opentelemetry_module_is_loaded(tmp_path: Path) -> None:
    script = (
        "import sys, json\n"
        "from sluicegate.app.factory import create_app\n"
        "from sluicegate.config import load_settings\n"
        f"create_app(load_settings(None, env={{'SLUICEGATE_DATA_DIR': {str(tmp_path)!r}}}))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
