"""`--log-format json`: one JSON object per line, the access fields at the top level."""

from __future__ import annotations

import json
import logging

from sluicegate.observe.logs import JsonFormatter


def record(message: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("sluicegate.access", logging.INFO, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_an_access_line() -> None:
    access = {"request_id": "chatcmpl-1", "dialect": "chat_completions", "status": 200, "tokens_out": 3}
    line = JsonFormatter().format(record('"POST /v1/chat/completions" 200', access=access))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "info" and entry["logger"] == "sluicegate.access"
    assert entry["message"] == '"POST /v1/chat/completions" 200'
    assert entry["timestamp"].endswith("+00:00")
    assert {k: entry[k] for k in access} == access


def test_an_exception_stays_on_one_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line and "ValueError" in json.loads(line)["exception"]
