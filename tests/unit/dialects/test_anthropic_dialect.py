"""AnthropicDialect: what the turn runner gets from it — the Turn, the clamp, ping heartbeats,
Anthropic's statuses, and a server-side cancel ending the stream with an `error` event."""

from __future__ import annotations

import orjson

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.dialects.anthropic.dialect import AnthropicDialect
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.base import EncoderContext
from sluicegate.engines.base import ModelInfo

DIALECT = AnthropicDialect(ThinkingSigner(b"d" * 32))
BODY = {"model": "m", "max_tokens": 128000, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_parse_and_clamp() -> None:
    turn = DIALECT.parse(BODY, {"beta": "true"}, {"anthropic-beta": "claude-code-20250219"})
    assert turn.stream and turn.id_prefix == "msg_" and turn.tools is not None
    assert turn.request.betas == ("claude-code-20250219",)
    DIALECT.check(turn, ModelInfo(id="m", engine="llamacpp", context_length=32768))
    assert turn.chat.sampling.max_tokens == 32768
    DIALECT.check(turn, ModelInfo(id="m", engine="openai"))  # unknown context: left as is
    assert turn.chat.sampling.max_tokens == 32768


def test_heartbeat_is_a_ping_event_and_statuses_are_anthropics() -> None:
    assert DIALECT.heartbeat is not None
    assert DIALECT.heartbeat.event == "ping" and orjson.loads(DIALECT.heartbeat.data) == {"type": "ping"}
    assert DIALECT.status(ErrorInfo(ErrorKind.OVERLOADED, "busy")) == 529
    assert DIALECT.error(ErrorInfo(ErrorKind.NOT_FOUND, "no"))["error"]["type"] == "not_found_error"


def test_server_cancel_ends_with_an_error_event() -> None:
    turn = DIALECT.parse(BODY, {}, {})
    context = EncoderContext("msg_1", 0, "m", Accumulator(), lambda _name: None, False)
    encoder = DIALECT.encoder(turn, context)
    assert encoder.opening() == [] and encoder.closing() == []
    (frame,) = encoder.cancelled("server_shutdown")
    assert frame.event == "error"
    assert orjson.loads(frame.data)["error"]["type"] == "api_error"
    assert encoder.response_object() is None
