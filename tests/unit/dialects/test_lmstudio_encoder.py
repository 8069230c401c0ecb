"""LMStudioEncoder: canonical events → named `/api/v1/chat` events, and the result body.

Payloads are compared with the example event data of `specs/lmstudio-streaming-events.md`
(copied below) and, for `tool_call.result`, of `specs/lmstudio-streaming-events-v0.md`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    LoadFinished,
    LoadProgress,
    LoadStarted,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.segment import segment
from sluicegate.dialects.lmstudio.encoder import (
    LMStudioEncoder,
    Vocabulary,
    chat_result_body,
    lmstudio_error,
    lmstudio_error_payload,
    no_tools,
)
from sluicegate.transport.sse import frames_bytes

INSTANCE = "openai/gpt-oss-20b"
RESPONSE_ID = "resp_02b2017dbc06c12bfc353a2ed6c2b802f8cc682884bb5716"
HUGGINGFACE = {"type": "ephemeral_mcp", "server_label": "huggingface"}
DOCUMENTED_ERROR_TYPES = {
    "invalid_request",
    "unknown",
    "mcp_connection_error",
    "plugin_connection_error",
    "not_implemented",
    "model_not_found",
    "job_not_found",
    "internal_error",
}

# --- example event data, verbatim from the specs ---------------------------------------------

REF_CHAT_START = {"type": "chat.start", "model_instance_id": "openai/gpt-oss-20b"}
REF_LOAD_START = {"type": "model_load.start", "model_instance_id": "openai/gpt-oss-20b"}
REF_LOAD_PROGRESS = {
    "type": "model_load.progress",
    "model_instance_id": "openai/gpt-oss-20b",
    "progress": 0.65,
}
REF_LOAD_END = {
    "type": "model_load.end",
    "model_instance_id": "openai/gpt-oss-20b",
    "load_time_seconds": 12.34,
}
REF_PROMPT_START = {"type": "prompt_processing.start"}
REF_PROMPT_PROGRESS = {"type": "prompt_processing.progress", "progress": 0.5}
REF_PROMPT_END = {"type": "prompt_processing.end"}
REF_REASONING_DELTA = {"type": "reasoning.delta", "content": "Need to"}
REF_MESSAGE_DELTA = {"type": "message.delta", "content": "The current"}
REF_TOOL_START = {
    "type": "tool_call.start",
    "tool": "model_search",
    "provider_info": {"type": "ephemeral_mcp", "server_label": "huggingface"},
}
REF_TOOL_ARGUMENTS = {
    "type": "tool_call.arguments",
    "tool": "model_search",
    "arguments": {"sort": "trendingScore", "limit": 1},
    "provider_info": {"type": "ephemeral_mcp", "server_label": "huggingface"},
}
REF_TOOL_FAILURE = {
    "type": "tool_call.failure",
    "reason": "Cannot find tool with name open_browser.",
    "metadata": {"type": "invalid_name", "tool_name": "open_browser"},
}


# --- helpers -------------------------------------------------------------------------------


async def _agen(events: Iterable[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


def providers_of(**tools: dict[str, Any]) -> Any:
    return lambda name: tools.get(name)


class Run:
    """One encoded stream: its bytes, its (event, data) pairs, and the encoder afterwards."""

    def __init__(self, data: bytes, encoder: LMStudioEncoder) -> None:
        self.bytes = data
        self.encoder = encoder
        self.events = parse(data)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [data for n, data in self.events if n == name]

    @property
    def result(self) -> dict[str, Any]:
        (end,) = self.of("chat.end")
        result: dict[str, Any] = end["result"]
        return result


async def run(
    raw: Iterable[RawEvent],
    *,
    vocabulary: Vocabulary = "current",
    providers: Any = no_tools,
    response_id: str | None = RESPONSE_ID,
) -> Run:
    """Raw events → segmenter → accumulator + encoder, as the route does."""
    accumulator = Accumulator()
    encoder = LMStudioEncoder(
        INSTANCE, accumulator, response_id=response_id, vocabulary=vocabulary, providers=providers
    )
    out = [frames_bytes(encoder.opening())]
    async for event in segment(_agen(raw)):
        accumulator.feed(event)
        out.append(frames_bytes(encoder.encode(event)))
    return Run(b"".join(out), encoder)


def parse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """`event: <name>\\ndata: <json>\\n\\n` frames, strictly, with data.type == the event name."""
    text = data.decode()
    assert text.endswith("\n\n")
    events = []
    for block in text[:-2].split("\n\n"):
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: "), block
        name, payload = event_line[len("event: ") :], json.loads(data_line[len("data: ") :])
        assert payload["type"] == name, block
        events.append((name, payload))
    return events


def words(text: str, channel: ItemKind = ItemKind.MESSAGE) -> list[RawEvent]:
    pieces = text.split(" ")
    return [TextDelta(channel, piece if i == 0 else " " + piece) for i, piece in enumerate(pieces)]


def tool_call(name: str, arguments: str, index: int = 0) -> list[RawEvent]:
    middle = len(arguments) // 2
    return [ToolCallDelta(index, arguments[:middle], None, name), ToolCallDelta(index, arguments[middle:])]


END: list[RawEvent] = [UsageReport(Usage(329, 268, 0, 5)), Finished(FinishReason.STOP)]


# --- frames --------------------------------------------------------------------------------


async def test_every_frame_is_an_event_line_and_a_data_line() -> None:
    result = await run([*words("Hello"), *END])

    assert result.bytes.startswith(
        b'event: chat.start\ndata: {"type":"chat.start","model_instance_id":"openai/gpt-oss-20b"}\n\n'
    )
    assert result.bytes.endswith(b"}}\n\n")
    assert result.names == ["chat.start", "message.start", "message.delta", "message.end", "chat.end"]


async def test_progress_events_match_the_spec_examples() -> None:
    raw: list[RawEvent] = [
        LoadStarted(INSTANCE),
        LoadProgress(0.65),
        LoadFinished(12.34),
        PromptStarted(),
        PromptProgress(0.5),
        PromptFinished(),
        *words("Hi"),
        *END,
    ]
    result = await run(raw)

    assert result.events[:7] == [
        ("chat.start", REF_CHAT_START),
        ("model_load.start", REF_LOAD_START),
        ("model_load.progress", REF_LOAD_PROGRESS),
        ("model_load.end", REF_LOAD_END),
        ("prompt_processing.start", REF_PROMPT_START),
        ("prompt_processing.progress", REF_PROMPT_PROGRESS),
        ("prompt_processing.end", REF_PROMPT_END),
    ]
    assert result.result["stats"]["model_load_time_seconds"] == 12.34


async def test_load_time_is_rounded_and_absent_without_a_load() -> None:
    loaded = await run([LoadStarted(INSTANCE), LoadFinished(1.23456), *words("Hi"), *END])
    assert loaded.of("model_load.end")[0]["load_time_seconds"] == 1.235
    assert loaded.result["stats"]["model_load_time_seconds"] == 1.235

    warm = await run([PromptStarted(), PromptFinished(), *words("Hi"), *END])
    assert "model_load_time_seconds" not in warm.result["stats"]
    assert not [n for n in warm.names if n.startswith("model_load.")]


async def test_reasoning_then_message_blocks_match_the_spec_examples() -> None:
    raw: list[RawEvent] = [
        TextDelta(ItemKind.REASONING, "Need to"),
        TextDelta(ItemKind.REASONING, " call"),
        TextDelta(ItemKind.REASONING, " function."),
        TextDelta(ItemKind.MESSAGE, "The current"),
        TextDelta(ItemKind.MESSAGE, " answer."),
        *END,
    ]
    result = await run(raw)

    assert result.names == [
        "chat.start",
        "reasoning.start",
        *["reasoning.delta"] * 3,
        "reasoning.end",
        "message.start",
        *["message.delta"] * 2,
        "message.end",
        "chat.end",
    ]
    assert result.of("reasoning.start") == [{"type": "reasoning.start"}]
    assert result.of("reasoning.end") == [{"type": "reasoning.end"}]
    assert result.of("message.start") == [{"type": "message.start"}]
    assert result.of("message.end") == [{"type": "message.end"}]
    assert result.of("reasoning.delta")[:2] == [
        REF_REASONING_DELTA,
        {"type": "reasoning.delta", "content": " call"},
    ]
    assert result.of("message.delta")[:2] == [
        REF_MESSAGE_DELTA,
        {"type": "message.delta", "content": " answer."},
    ]
    assert result.result == {
        "model_instance_id": INSTANCE,
        "output": [
            {"type": "reasoning", "content": "Need to call function."},
            {"type": "message", "content": "The current answer."},
        ],
        "stats": {
            "input_tokens": 329,
            "total_output_tokens": 268,
            "reasoning_output_tokens": 5,
            "tokens_per_second": result.result["stats"]["tokens_per_second"],
            "time_to_first_token_seconds": result.result["stats"]["time_to_first_token_seconds"],
        },
        "response_id": RESPONSE_ID,
    }


async def test_a_refusal_is_a_message_block() -> None:
    result = await run([*words("I cannot help.", ItemKind.REFUSAL), *END])

    assert result.names[1:-1] == ["message.start", *["message.delta"] * 3, "message.end"]
    assert result.result["output"] == [{"type": "message", "content": "I cannot help."}]


async def test_chat_end_result_is_the_non_streaming_body() -> None:
    result = await run(
        [*words("Thinking.", ItemKind.REASONING), *tool_call("nope", "{}"), *words("Done."), *END]
    )

    assert result.encoder.result == result.result
    assert result.encoder.body() == result.result
    unstored = await run([*words("Hi"), *END], response_id=None)
    assert "response_id" not in unstored.result


# --- tool calls ----------------------------------------------------------------------------


async def test_an_unknown_tool_is_a_lone_failure_in_the_current_vocabulary() -> None:
    result = await run(
        [*words("Let me look.", ItemKind.REASONING), *tool_call("open_browser", '{"url": "x"}'), *END]
    )

    tool_events = [n for n in result.names if n.startswith("tool_call.")]
    assert tool_events == ["tool_call.failure"]
    assert result.of("tool_call.failure") == [REF_TOOL_FAILURE]
    assert result.result["output"][1] == {
        "type": "invalid_tool_call",
        "reason": "Cannot find tool with name open_browser.",
        "metadata": {"type": "invalid_name", "tool_name": "open_browser"},
    }


async def test_an_unknown_tool_is_a_lone_result_in_v0() -> None:
    result = await run([*tool_call("open_browser", '{"url": "https://x.example"}'), *END], vocabulary="v0")

    assert [n for n in result.names if n.startswith("tool_call.")] == ["tool_call.result"]
    (event,) = result.of("tool_call.result")
    assert set(event) == {"type", "tool", "arguments", "output", "provider_info"}
    assert event["tool"] == "open_browser"
    assert event["arguments"] == {"url": "https://x.example"}
    assert event["output"] == "Cannot find tool with name open_browser."
    assert "tool_call.failure" not in result.names and "tool_call.success" not in result.names
    # The body does not depend on the vocabulary.
    current = await run([*tool_call("open_browser", '{"url": "https://x.example"}'), *END])
    assert result.result["output"] == current.result["output"]


@pytest.mark.parametrize("vocabulary", ["current", "v0"])
async def test_a_provided_tool_starts_and_gets_its_arguments(vocabulary: Vocabulary) -> None:
    providers = providers_of(model_search=HUGGINGFACE)
    raw = [*tool_call("model_search", '{"sort": "trendingScore", "limit": 1}'), *END]
    result = await run(raw, vocabulary=vocabulary, providers=providers)

    assert [n for n in result.names if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.arguments",
    ]
    assert result.of("tool_call.start") == [REF_TOOL_START]
    assert result.of("tool_call.arguments") == [REF_TOOL_ARGUMENTS]


async def test_unparseable_arguments_for_a_provided_tool_fail_after_the_start() -> None:
    providers = providers_of(model_search=HUGGINGFACE)
    result = await run([*tool_call("model_search", '{"sort": '), *END], providers=providers)

    assert [n for n in result.names if n.startswith("tool_call.")] == ["tool_call.start", "tool_call.failure"]
    (failure,) = result.of("tool_call.failure")
    assert failure["metadata"]["type"] == "invalid_arguments"
    assert failure["metadata"]["tool_name"] == "model_search"
    assert failure["metadata"]["provider_info"] == HUGGINGFACE
    assert "model_search" in failure["reason"]
    assert result.result["output"] == [
        {"type": "invalid_tool_call", "reason": failure["reason"], "metadata": failure["metadata"]}
    ]


async def test_tool_argument_deltas_are_not_message_deltas() -> None:
    result = await run([*tool_call("open_browser", '{"url": "https://x.example/long/path"}'), *END])

    assert "message.delta" not in result.names and "reasoning.delta" not in result.names


# --- errors --------------------------------------------------------------------------------


async def test_an_error_is_followed_by_chat_end_with_what_was_generated() -> None:
    raw: list[RawEvent] = [
        *words("This will break", ItemKind.MESSAGE),
        UsageReport(Usage(12, 3)),
        Failed(ErrorInfo(ErrorKind.ENGINE, "scripted engine exploded", code="scripted_failure")),
    ]
    result = await run(raw)

    # The message cut off by the error is not ended: straight to the error ending.
    assert result.names[-3:] == ["message.delta", "error", "chat.end"]
    assert result.of("error") == [
        {
            "type": "error",
            "error": {
                "type": "internal_error",
                "message": "scripted engine exploded",
                "code": "scripted_failure",
            },
        }
    ]
    assert result.result["output"] == [{"type": "message", "content": "This will break"}]
    assert result.result["stats"]["input_tokens"] == 12
    assert result.result["stats"]["total_output_tokens"] == 3
    assert result.encoder.result == result.result


async def test_an_error_before_any_output_still_ends_with_chat_end() -> None:
    raw: list[RawEvent] = [
        PromptStarted(),
        Failed(ErrorInfo(ErrorKind.TIMEOUT, "Request timed out after 2s.")),
    ]
    result = await run(raw)

    assert result.names == ["chat.start", "prompt_processing.start", "error", "chat.end"]
    assert result.of("error")[0]["error"] == {
        "type": "internal_error",
        "message": "Request timed out after 2s.",
        "code": "timeout",
    }
    assert result.result["output"] == []


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_error_kind_has_a_documented_type(kind: ErrorKind) -> None:
    payload = lmstudio_error_payload(ErrorInfo(kind, "it went wrong"))
    assert payload["type"] in DOCUMENTED_ERROR_TYPES
    assert payload["message"] == "it went wrong"
    assert set(payload) <= {"type", "message", "code", "param"}


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (
            ErrorInfo(
                ErrorKind.INVALID_REQUEST, '"model" is required', "model", "missing_required_parameter"
            ),
            {
                "type": "invalid_request",
                "message": '"model" is required',
                "code": "missing_required_parameter",
                "param": "model",
            },
        ),
        (
            ErrorInfo(ErrorKind.NOT_FOUND, "no model", "model", "model_not_found"),
            {"type": "model_not_found", "message": "no model", "code": "model_not_found", "param": "model"},
        ),
        (
            ErrorInfo(ErrorKind.NOT_FOUND, "no job", "job_id", "job_not_found"),
            {"type": "job_not_found", "message": "no job", "code": "job_not_found", "param": "job_id"},
        ),
        (
            ErrorInfo(ErrorKind.NOT_FOUND, "no such response", "previous_response_id"),
            {"type": "invalid_request", "message": "no such response", "param": "previous_response_id"},
        ),
        (
            ErrorInfo(ErrorKind.NOT_IMPLEMENTED, "later"),
            {"type": "not_implemented", "message": "later"},
        ),
        (
            ErrorInfo(ErrorKind.IDLE_TIMEOUT, "silent"),
            {"type": "internal_error", "message": "silent", "code": "stream_idle_timeout"},
        ),
    ],
)
def test_error_payloads(info: ErrorInfo, expected: dict[str, Any]) -> None:
    assert lmstudio_error_payload(info) == expected
    assert lmstudio_error(info) == {"error": expected}


# --- the result body -----------------------------------------------------------------------


def test_result_body_stats_from_usage() -> None:
    accumulator = Accumulator()
    for event in [UsageReport(Usage(25, 8, 3, 2)), Finished(FinishReason.STOP)]:
        accumulator.feed(event)
    body = chat_result_body(accumulator.result, [], instance_id="m:2", response_id=None)

    assert body["model_instance_id"] == "m:2"
    assert body["output"] == []
    assert "response_id" not in body
    stats = body["stats"]
    assert (stats["input_tokens"], stats["total_output_tokens"], stats["reasoning_output_tokens"]) == (
        25,
        8,
        2,
    )
    assert set(stats) == {
        "input_tokens",
        "total_output_tokens",
        "reasoning_output_tokens",
        "tokens_per_second",
        "time_to_first_token_seconds",
    }


@pytest.mark.parametrize(("store", "vocabulary"), [(True, "v0"), (False, "current")])
def test_the_dialects_encoder_is_made_with_the_turns_options(store: bool, vocabulary: str) -> None:
    """`encoder_for` (compiled: the dialect passes two arguments, not five, three by name)
    gives the encoder the instance, the accumulator, the stored id, vocabulary and providers."""
    from sluicegate.dialects.base import EncoderContext
    from sluicegate.dialects.lmstudio.dialect import LMStudioDialect

    body = {"model": "m", "input": "hi", "stream": True, "store": store}
    turn = LMStudioDialect().parse(body, {"events": vocabulary}, {})

    def providers(name: str) -> Any:
        return None

    accumulator = Accumulator()
    context = EncoderContext(RESPONSE_ID, 7, INSTANCE, accumulator, providers, store)
    encoder = LMStudioDialect().encoder(turn, context)
    assert (encoder.instance_id, encoder.accumulator, encoder.vocabulary) == (
        INSTANCE,
        accumulator,
        vocabulary,
    )
    assert encoder.response_id == (RESPONSE_ID if store else None)
    assert encoder.providers is providers
