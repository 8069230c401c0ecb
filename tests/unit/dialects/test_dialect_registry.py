"""The dialect registry: one table that routing, auth, errors and metrics read."""

from __future__ import annotations

import pytest

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.dialects.registry import DIALECTS, dialect_for, dialect_name

INFO = ErrorInfo(ErrorKind.NOT_FOUND, "model 'x' not found")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/chat", "ollama"),
        ("/api/tags", "ollama"),
        ("/api/nope", "ollama"),
        ("/api/v1/chat", "lmstudio"),
        ("/api/v1/models/load", "lmstudio"),
        ("/api/v0/embeddings", "lmstudio"),
        ("/v1/chat/completions", "chat_completions"),
        ("/v1/responses/resp_1/cancel", "responses"),
        ("/v1/messages/count_tokens", "anthropic"),
        ("/v1/completions", "completions"),
        ("/infill", "infill"),
        ("/v1/models", "openai"),
        ("/v1/embeddings", "openai"),
        ("/", ""),
        ("/health", ""),
        ("/metrics", ""),
    ],
)
def test_each_path_belongs_to_one_dialect(path: str, name: str) -> None:
    assert dialect_name(path) == name


def test_each_dialect_renders_its_own_error_shape() -> None:
    assert dialect_for("/api/chat").error(INFO) == {"error": "model 'x' not found"}
    assert dialect_for("/api/v1/chat").error(INFO)["error"]["message"] == INFO.message
    assert dialect_for("/v1/messages").error(INFO)["type"] == "error"
    assert dialect_for("/v1/models").error(INFO)["error"]["code"] == "not_found"
    # llama-server's shape carries the status it is answered with (a router's 405)
    assert dialect_for("/infill").body(INFO, 405)["error"]["code"] == 405


def test_transports_and_heartbeats_are_declared() -> None:
    by_name = {spec.name: spec for spec in DIALECTS}
    assert by_name["ollama"].transport == "ndjson" and by_name["ollama"].heartbeat is None
    assert by_name["anthropic"].heartbeat is not None  # its `ping` event
    assert all(spec.transport == "sse" for name, spec in by_name.items() if name != "ollama")
    assert len(by_name) == len(DIALECTS)  # one entry per dialect
