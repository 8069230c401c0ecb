"""Ollama's error shape: `{"error": "<message>"}`, with the canonical kind's HTTP status.

Ollama's own server answers 400 for bad input, 404 for an unknown model, 500 for its faults;
the `ollama` client libraries raise `ResponseError(error, status_code)` from exactly this.
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import ErrorInfo


def ollama_error(info: ErrorInfo) -> dict[str, Any]:
    return {"error": info.message}
