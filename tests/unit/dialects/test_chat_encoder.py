"""ChatCompletionsEncoder: canonical events → `chat.completion.chunk` frames.

Frames are compared with the examples of `specs/chat-completions-streaming.md` (copied below,
byte for byte) and then fed to the `openai` SDK's own stream accumulator, which is what
`client.chat.completions.stream()` runs on the client side.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    PromptProgress,
    RawEvent,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ChatRequest, Message, SamplingParams, ToolSpec
from sluicegate.core.segment import segment
from sluicegate.dialects.chat_completions.encoder import ChatCompletionsEncoder, completion_body, usage_body
from sluicegate.engines.scripted import ScriptedEngine, parse_script
from sluicegate.transport.sse import frames_bytes

REF_ID = "chatcmpl-abc123"
REF_CREATED = 1706123456
REF_MODEL = "llama-3.1-8b"

# --- reference frames, verbatim from specs/chat-completions-streaming.md ---------------------

REF_ROLE = 'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
REF_CONTENT = [
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"The"},"finish_reason":null}]}',
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" capital"},"finish_reason":null}]}',
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" of France is Paris."},"finish_reason":null}]}',
]
REF_FINISH_STOP = 'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
REF_FINISH_USAGE = 'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":25,"completion_tokens":8,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":null},"completion_tokens_details":{"reasoning_tokens":null,"audio_tokens":null,"accepted_prediction_tokens":null,"rejected_prediction_tokens":null}}}'
REF_REFUSAL = [
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"refusal":"I\'m sorry, but I"},"finish_reason":null}]}',
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"refusal":" cannot help with that request."},"finish_reason":null}]}',
]
REF_TOOL_FIRST = 'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}'
REF_TOOL_ARGS = [
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"location\\":"}}]},"finish_reason":null}]}',
    'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},"finish_reason":null}]}',
]
REF_FINISH_TOOLS = 'data: {"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1706123456,"model":"llama-3.1-8b","service_tier":null,"system_fingerprint":null,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}'
REF_DONE = "data: [DONE]"

ENVELOPE_KEYS = ["id", "object", "created", "model", "service_tier", "system_fingerprint", "choices"]
CHOICE_KEYS = ["index", "delta", "logprobs", "finish_reason"]


def with_logprobs_null(reference: str) -> str:
    """The issue asks for `logprobs` in every choice (the reference omits it): null, before finish_reason."""
    return reference.replace(',"finish_reason"', ',"logprobs":null,"finish_reason"')


# --- helpers ---------------------------------------------------------------------------------


async def _agen(events: Iterable[RawEvent]) -> AsyncIterator[RawEvent]:
    for event in events:
        yield event


async def canonical(raw: Iterable[RawEvent]) -> list[Event]:
    return [event async for event in segment(_agen(raw))]


def encoder(**kwargs: Any) -> ChatCompletionsEncoder:
    options: dict[str, Any] = {"include_usage": False, "logprobs": False}
    options.update(kwargs)
    return ChatCompletionsEncoder(REF_ID, REF_CREATED, REF_MODEL, **options)


def wire(enc: ChatCompletionsEncoder, event: Event) -> bytes:
    """An event's frames as the transport writes them; after the terminal event, what the
    runner sends next (`closing`: `[DONE]`)."""
    out = frames_bytes(enc.encode(event))
    if isinstance(event, Finished | Failed):
        out += frames_bytes(enc.closing())
    return out


def encode_all(events: Iterable[Event], **kwargs: Any) -> bytes:
    enc = encoder(**kwargs)
    return b"".join(wire(enc, event) for event in events)


async def stream_bytes(raw: Iterable[RawEvent], **kwargs: Any) -> bytes:
    return encode_all(await canonical(raw), **kwargs)


def frames(stream: bytes) -> list[str]:
    """SSE frames as text, without their blank-line terminators."""
    text = stream.decode()
    assert text.endswith("\n\n"), "every frame ends with a blank line"
    parts = text.split("\n\n")
    assert parts[-1] == ""
    return parts[:-1]


def chunks(stream: bytes) -> list[dict[str, Any]]:
    """The JSON of every `data:` frame before `[DONE]`; asserts the stream ends with `[DONE]`."""
    fs = frames(stream)
    assert fs[-1] == REF_DONE
    out = []
    for frame in fs[:-1]:
        assert frame.startswith("data: "), frame
        out.append(json.loads(frame[len("data: ") :]))
    return out


def deltas(stream: bytes) -> list[dict[str, Any]]:
    return [chunk["choices"][0]["delta"] for chunk in chunks(stream)]


def sdk_final(stream: bytes, input_tools: list[dict[str, Any]] | None = None) -> Any:
    """Run the frames through openai's ChatCompletionStreamState and return the final completion."""
    state = ChatCompletionStreamState(input_tools=input_tools) if input_tools else ChatCompletionStreamState()
    for frame in frames(stream):
        assert not frame.startswith("event: error"), frame
        payload = frame[len("data: ") :]
        if payload == "[DONE]":
            break
        chunk = ChatCompletionChunk.model_validate(json.loads(payload))
        list(state.handle_chunk(chunk))
    return state.get_final_completion()


def weather_tool(strict: bool = True) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}},
                "required": ["location"],
                "additionalProperties": False,
            },
            "strict": strict,
        },
    }


TEXT_RAW: list[RawEvent] = [
    TextDelta(ItemKind.MESSAGE, "The"),
    TextDelta(ItemKind.MESSAGE, " capital"),
    TextDelta(ItemKind.MESSAGE, " of France is Paris."),
    UsageReport(Usage(prompt_tokens=25, completion_tokens=8)),
    Finished(FinishReason.STOP),
]


# --- text ---------------------------------------------------------------------------------------


async def test_text_stream_matches_reference_byte_for_byte() -> None:
    stream = await stream_bytes(TEXT_RAW)
    expected = [REF_ROLE, *REF_CONTENT, REF_FINISH_STOP]
    assert frames(stream) == [with_logprobs_null(line) for line in expected] + [REF_DONE]


async def test_envelope_and_choice_keys_in_reference_order() -> None:
    for chunk in chunks(await stream_bytes(TEXT_RAW)):
        assert list(chunk) == ENVELOPE_KEYS
        assert chunk["id"] == REF_ID
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["created"] == REF_CREATED
        assert chunk["model"] == REF_MODEL
        assert chunk["service_tier"] is None
        assert chunk["system_fingerprint"] is None
        assert len(chunk["choices"]) == 1
        assert list(chunk["choices"][0]) == CHOICE_KEYS
        assert chunk["choices"][0]["index"] == 0


async def test_include_usage_puts_usage_on_finish_chunk_and_null_on_the_others() -> None:
    all_chunks = chunks(await stream_bytes(TEXT_RAW, include_usage=True))
    assert len(all_chunks) == 5
    for chunk in all_chunks[:-1]:
        assert list(chunk) == [*ENVELOPE_KEYS, "usage"]
        assert chunk["usage"] is None
        assert chunk["choices"][0]["finish_reason"] is None
    final = all_chunks[-1]
    assert list(final) == [*ENVELOPE_KEYS, "usage"]
    assert final["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]
    reference_usage = json.loads(REF_FINISH_USAGE[len("data: ") :])["usage"]
    # Same structure and key order as the reference; counts are numbers (0 where the reference has null).
    assert list(final["usage"]) == list(reference_usage)
    for key in ("prompt_tokens_details", "completion_tokens_details"):
        assert list(final["usage"][key]) == list(reference_usage[key])
    assert final["usage"]["prompt_tokens"] == 25
    assert final["usage"]["completion_tokens"] == 8
    assert final["usage"]["total_tokens"] == 33
    assert final["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert final["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


async def test_finish_chunk_with_usage_matches_reference_apart_from_null_counts() -> None:
    final_frame = frames(await stream_bytes(TEXT_RAW, include_usage=True))[-2]
    expected = with_logprobs_null(REF_FINISH_USAGE).replace('"audio_tokens":null', '"audio_tokens":0')
    expected = expected.replace('"reasoning_tokens":null', '"reasoning_tokens":0')
    expected = expected.replace('prediction_tokens":null', 'prediction_tokens":0')
    assert final_frame == expected


async def test_without_include_usage_there_is_no_usage_key_anywhere() -> None:
    stream = await stream_bytes(TEXT_RAW, include_usage=False)
    assert b'"usage"' not in stream
    for chunk in chunks(stream):
        assert "usage" not in chunk


async def test_cached_and_reasoning_tokens_reported() -> None:
    raw = [
        TextDelta(ItemKind.REASONING, "hm"),
        TextDelta(ItemKind.MESSAGE, "ok"),
        UsageReport(Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=7, reasoning_tokens=1)),
        Finished(FinishReason.STOP),
    ]
    usage = chunks(await stream_bytes(raw, include_usage=True))[-1]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 7
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 1
    assert usage["total_tokens"] == 12


async def test_role_only_in_first_delta_of_a_mixed_stream() -> None:
    raw = [
        TextDelta(ItemKind.REASONING, "Think"),
        TextDelta(ItemKind.REASONING, " more"),
        TextDelta(ItemKind.MESSAGE, "Answer"),
        ToolCallDelta(0, '{"a":', "call_1", "f"),
        ToolCallDelta(0, "1}"),
        ToolCallDelta(1, "{}", "call_2", "g"),
        Finished(FinishReason.TOOL_CALLS),
    ]
    all_deltas = deltas(await stream_bytes(raw))
    assert all_deltas[0] == {"role": "assistant", "content": None}  # reasoning first: no message yet
    assert all("role" not in d for d in all_deltas[1:])
    sdk = sdk_final(await stream_bytes(raw))
    assert sdk.choices[0].message.role == "assistant"


async def test_empty_stream_still_sends_role_then_finish_then_done() -> None:
    stream = await stream_bytes([Finished(FinishReason.STOP)])
    role = with_logprobs_null(REF_ROLE).replace('"content":""', '"content":null')
    assert frames(stream) == [role, with_logprobs_null(REF_FINISH_STOP), REF_DONE]
    # the SDK ends with content null, as the non-streaming body does
    assert sdk_final(stream).choices[0].message.content is None


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter"])
async def test_finish_reasons(reason: str) -> None:
    raw = [TextDelta(ItemKind.MESSAGE, "x"), Finished(FinishReason(reason))]
    assert chunks(await stream_bytes(raw))[-1]["choices"][0]["finish_reason"] == reason


# --- refusal -------------------------------------------------------------------------------


REFUSAL_RAW: list[RawEvent] = [
    TextDelta(ItemKind.REFUSAL, "I'm sorry, but I"),
    TextDelta(ItemKind.REFUSAL, " cannot help with that request."),
    Finished(FinishReason.STOP),
]


async def test_refusal_stream_matches_reference() -> None:
    fs = frames(await stream_bytes(REFUSAL_RAW))
    # First delta as OpenAI sends it for refusals (notes §3): content null, so the final
    # message has `content: null`, as the reference's prose says.
    first = json.loads(fs[0][len("data: ") :])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": ""}
    assert fs[1:] == [
        *(with_logprobs_null(line) for line in REF_REFUSAL),
        with_logprobs_null(REF_FINISH_STOP),
        REF_DONE,
    ]


async def test_refusal_through_the_sdk() -> None:
    message = sdk_final(await stream_bytes(REFUSAL_RAW)).choices[0].message
    assert message.refusal == "I'm sorry, but I cannot help with that request."
    assert message.content is None


# --- tool calls ------------------------------------------------------------------------------


TOOL_RAW: list[RawEvent] = [
    ToolCallDelta(0, "", "call_abc", "get_weather"),
    ToolCallDelta(0, '{"location":'),
    ToolCallDelta(0, '"Paris"}'),
    Finished(FinishReason.TOOL_CALLS),
]


async def test_tool_call_stream_matches_reference() -> None:
    fs = frames(await stream_bytes(TOOL_RAW))
    first = json.loads(fs[0][len("data: ") :])
    reference_first = json.loads(REF_TOOL_FIRST[len("data: ") :])
    # The reference's first delta, with `content: null` as OpenAI sends it (notes §3).
    reference_delta = reference_first["choices"][0]["delta"]
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": reference_delta["tool_calls"],
    }
    assert list(first["choices"][0]["delta"]["tool_calls"][0]) == ["index", "id", "type", "function"]
    assert fs[1:] == [
        *(with_logprobs_null(line) for line in REF_TOOL_ARGS),
        with_logprobs_null(REF_FINISH_TOOLS),
        REF_DONE,
    ]


async def test_later_tool_deltas_carry_only_index_and_arguments() -> None:
    raw = [
        ToolCallDelta(0, '{"location"', "call_abc", "get_weather"),
        ToolCallDelta(0, ": "),
        ToolCallDelta(0, '"Paris"}'),
        Finished(FinishReason.TOOL_CALLS),
    ]
    all_deltas = deltas(await stream_bytes(raw))
    calls = [d["tool_calls"][0] for d in all_deltas if "tool_calls" in d]
    assert calls[0]["id"] == "call_abc"
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert calls[1:] == [
        {"index": 0, "function": {"arguments": '{"location"'}},
        {"index": 0, "function": {"arguments": ": "}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
    ]


async def test_tool_call_after_text_has_no_role() -> None:
    raw = [
        TextDelta(ItemKind.MESSAGE, "Let me check."),
        ToolCallDelta(0, "{}", "call_abc", "get_weather"),
        Finished(FinishReason.TOOL_CALLS),
    ]
    all_deltas = deltas(await stream_bytes(raw))
    assert all_deltas[0] == {"role": "assistant", "content": ""}
    assert all_deltas[1] == {"content": "Let me check."}
    assert all_deltas[2] == {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }


PARALLEL_RAW: list[RawEvent] = [
    ToolCallDelta(0, '{"location":', "call_a", "get_weather"),
    ToolCallDelta(0, ' "Paris"}'),
    ToolCallDelta(1, '{"location":', "call_b", "get_weather"),
    ToolCallDelta(1, ' "Rome"}'),
    Finished(FinishReason.TOOL_CALLS),
]


async def test_parallel_tool_calls_get_index_0_and_1() -> None:
    all_deltas = deltas(await stream_bytes(PARALLEL_RAW))
    firsts = [d["tool_calls"][0] for d in all_deltas if "tool_calls" in d and "id" in d["tool_calls"][0]]
    assert [(c["index"], c["id"], c["function"]["name"]) for c in firsts] == [
        (0, "call_a", "get_weather"),
        (1, "call_b", "get_weather"),
    ]
    assert "role" in all_deltas[0] and "role" not in all_deltas[2]
    indexes = [d["tool_calls"][0]["index"] for d in all_deltas if "tool_calls" in d]
    assert indexes == [0, 0, 0, 1, 1, 1]  # announce, then two argument pieces, per call


async def test_tool_calls_through_the_sdk_are_not_duplicated() -> None:
    final = sdk_final(await stream_bytes(PARALLEL_RAW), input_tools=[weather_tool()])
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert [c.id for c in calls] == ["call_a", "call_b"]
    assert [c.function.name for c in calls] == ["get_weather", "get_weather"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"location": "Paris"}, {"location": "Rome"}]
    # strict tools are parsed by the SDK itself; a mangled name would leave this None
    assert [c.function.parsed_arguments for c in calls] == [{"location": "Paris"}, {"location": "Rome"}]
    assert choice.message.content is None


async def test_name_arriving_late_is_announced_once_with_buffered_arguments() -> None:
    raw = [
        ToolCallDelta(0, '{"location":', "call_late"),
        ToolCallDelta(0, ' "Oslo"}', name="get_weather"),
        ToolCallDelta(0, "", name="get_weather"),
        Finished(FinishReason.TOOL_CALLS),
    ]
    stream = await stream_bytes(raw)
    calls = [d["tool_calls"][0] for d in deltas(stream) if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert sum("name" in c["function"] for c in calls) == 1
    final = sdk_final(stream)
    call = final.choices[0].message.tool_calls[0]
    assert call.id == "call_late"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"location": "Oslo"}


# --- reasoning -------------------------------------------------------------------------------


REASONING_RAW: list[RawEvent] = [
    TextDelta(ItemKind.REASONING, "Paris"),
    TextDelta(ItemKind.REASONING, " is the capital."),
    TextDelta(ItemKind.MESSAGE, "Paris."),
    Finished(FinishReason.STOP),
]


@pytest.mark.parametrize(
    ("field", "keys"),
    [
        ("reasoning_content", ["reasoning_content"]),
        ("reasoning", ["reasoning"]),
        ("both", ["reasoning_content", "reasoning"]),
    ],
)
async def test_reasoning_field_variants(field: str, keys: list[str]) -> None:
    stream = await stream_bytes(REASONING_RAW, reasoning_field=field)
    all_deltas = deltas(stream)
    assert all_deltas[0] == {"role": "assistant", "content": None}
    assert all_deltas[1] == dict.fromkeys(keys, "Paris")
    assert all_deltas[2] == dict.fromkeys(keys, " is the capital.")
    assert all_deltas[3] == {"content": "Paris."}
    message = sdk_final(stream).choices[0].message
    assert message.content == "Paris."
    for key in keys:
        assert message.model_extra[key] == "Paris is the capital."
    for other in {"reasoning_content", "reasoning"} - set(keys):
        assert other not in message.model_extra


async def test_reasoning_only_stream_ends_with_null_content_like_the_body() -> None:
    raw = [TextDelta(ItemKind.REASONING, "just thinking"), Finished(FinishReason.STOP)]
    events = await canonical(raw)
    message = sdk_final(encode_all(events)).choices[0].message
    body = completion_body(
        accumulate(events).result, completion_id=REF_ID, created=REF_CREATED, model=REF_MODEL, logprobs=False
    )
    assert message.content is None
    assert body["choices"][0]["message"]["content"] is None
    assert message.model_extra["reasoning_content"] == "just thinking"


# --- logprobs -------------------------------------------------------------------------------

FOO = TokenLogprob(
    "Foo",
    -0.0025,
    [70, 111, 111],
    [TopLogprob("Foo", -0.0025, [70, 111, 111]), TopLogprob("Bar", -6.5, [66, 97, 114])],
)
FOO_JSON = {
    "token": "Foo",
    "logprob": -0.0025,
    "bytes": [70, 111, 111],
    "top_logprobs": [
        {"token": "Foo", "logprob": -0.0025, "bytes": [70, 111, 111]},
        {"token": "Bar", "logprob": -6.5, "bytes": [66, 97, 114]},
    ],
}


async def test_per_chunk_logprobs_for_content() -> None:
    raw = [TextDelta(ItemKind.MESSAGE, "Foo", [FOO]), Finished(FinishReason.STOP)]
    stream = await stream_bytes(raw, logprobs=True)
    all_chunks = chunks(stream)
    assert all_chunks[0]["choices"][0]["logprobs"] is None  # role chunk
    assert all_chunks[1]["choices"][0]["logprobs"] == {"content": [FOO_JSON], "refusal": None}
    assert list(all_chunks[1]["choices"][0]["logprobs"]["content"][0]) == [
        "token",
        "logprob",
        "bytes",
        "top_logprobs",
    ]
    assert all_chunks[-1]["choices"][0]["logprobs"] is None  # finish chunk
    final = sdk_final(stream)
    assert [lp.token for lp in final.choices[0].logprobs.content] == ["Foo"]
    assert [t.token for t in final.choices[0].logprobs.content[0].top_logprobs] == ["Foo", "Bar"]


async def test_per_chunk_logprobs_for_refusal() -> None:
    raw = [TextDelta(ItemKind.REFUSAL, "Foo", [FOO]), Finished(FinishReason.STOP)]
    all_chunks = chunks(await stream_bytes(raw, logprobs=True))
    assert all_chunks[1]["choices"][0]["delta"] == {"refusal": "Foo"}
    assert all_chunks[1]["choices"][0]["logprobs"] == {"content": None, "refusal": [FOO_JSON]}


async def test_logprobs_requested_but_engine_has_none_gives_empty_list() -> None:
    raw = [TextDelta(ItemKind.MESSAGE, "x"), Finished(FinishReason.STOP)]
    all_chunks = chunks(await stream_bytes(raw, logprobs=True))
    assert all_chunks[1]["choices"][0]["logprobs"] == {"content": [], "refusal": None}


async def test_logprobs_not_requested_are_null_everywhere() -> None:
    raw = [TextDelta(ItemKind.MESSAGE, "Foo", [FOO]), Finished(FinishReason.STOP)]
    for chunk in chunks(await stream_bytes(raw, logprobs=False)):
        assert chunk["choices"][0]["logprobs"] is None


# --- errors and endings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "expected_type", "expected_code"),
    [
        (ErrorInfo(ErrorKind.TIMEOUT, "Request timed out after 30s."), "timeout_error", "timeout"),
        (ErrorInfo(ErrorKind.IDLE_TIMEOUT, "silent"), "stream_idle_timeout", "stream_idle_timeout"),
        (ErrorInfo(ErrorKind.ENGINE, "boom", code="scripted_failure"), "api_error", "scripted_failure"),
        (ErrorInfo(ErrorKind.ENGINE, "boom"), "api_error", "engine_error"),
        (ErrorInfo(ErrorKind.CANCELLED, "gone"), None, "cancelled"),
    ],
)
def test_failed_gives_error_event_then_done(
    info: ErrorInfo, expected_type: str | None, expected_code: str
) -> None:
    out = wire(encoder(), Failed(info))
    fs = frames(out)
    assert len(fs) == 2
    head, data = fs[0].split("\n")
    assert head == "event: error"
    assert data.startswith("data: ")
    body = json.loads(data[len("data: ") :])
    assert body == {
        "error": {"message": info.message, "type": expected_type, "param": None, "code": expected_code}
    }
    assert list(body["error"]) == ["message", "type", "param", "code"]
    assert fs[1] == REF_DONE


async def test_mid_stream_failure_ends_with_error_and_done_without_finish_chunk() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield TextDelta(ItemKind.MESSAGE, "half")
        yield Failed(ErrorInfo(ErrorKind.TIMEOUT, "Request timed out after 30s."))

    events = [event async for event in segment(engine())]
    stream = encode_all(events, include_usage=True)
    fs = frames(stream)
    assert fs[-2].startswith("event: error\ndata: ")
    assert json.loads(fs[-2].split("data: ", 1)[1])["error"]["type"] == "timeout_error"
    assert fs[-1] == REF_DONE
    assert b'"finish_reason":"' not in stream  # no finish chunk after an error
    assert stream.count(b"data: [DONE]") == 1


async def test_a_tool_call_cut_off_by_a_failure_never_gets_finish_reason_tool_calls() -> None:
    async def engine() -> AsyncIterator[RawEvent]:
        yield ToolCallDelta(0, '{"location":', "call_abc", "get_weather")
        yield Failed(ErrorInfo(ErrorKind.ENGINE, "boom"))

    stream = encode_all([event async for event in segment(engine())], include_usage=True)
    fs = frames(stream)
    assert '"tool_calls":[{"index":0' in fs[0]  # the call started streaming
    assert b'"finish_reason":"' not in stream  # but it is never reported complete
    assert fs[-2].startswith("event: error\ndata: ") and fs[-1] == REF_DONE


def test_finished_is_finish_chunk_then_done() -> None:
    enc = encoder()
    wire(enc, ItemAdded(Item(0, ItemKind.MESSAGE, "msg_1")))
    out = wire(enc, Finished(FinishReason.LENGTH))
    fs = frames(out)
    assert len(fs) == 2
    assert json.loads(fs[0][6:])["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert fs[1] == REF_DONE


def test_a_text_stream_keeps_no_generic_chunk_head() -> None:
    """A held stream's memory: a text stream's encoder keeps its per-token frame's ends only;
    the generic chunk's head is kept once a delta that needs it per token comes (reasoning)."""
    enc = encoder()
    message = Item(0, ItemKind.MESSAGE, "msg_1")
    wire(enc, ItemAdded(message))
    wire(enc, ItemDelta(message, "Hi"))
    wire(enc, Finished(FinishReason.STOP))
    assert enc._head_kept is None
    reasoning = Item(1, ItemKind.REASONING, "rs_1")
    wire(enc, ItemDelta(reasoning, "hm"))
    assert enc._head_kept is not None and enc._content_head.startswith(enc._head_kept)


def test_events_without_wire_form_encode_to_nothing() -> None:
    enc = encoder()
    message = Item(0, ItemKind.MESSAGE, "msg_1")
    assert wire(enc, ItemAdded(message)) != b""
    assert wire(enc, ItemDone(message)) == b""
    assert wire(enc, UsageReport(Usage(1, 1))) == b""
    # a second item does not repeat the role chunk
    assert wire(enc, ItemAdded(Item(1, ItemKind.REASONING, "rs_1"))) == b""
    # server-side tool results have no Chat Completions form
    assert wire(enc, ItemAdded(Item(2, ItemKind.TOOL_RESULT, "fco_1"))) == b""
    assert wire(enc, ItemDelta(Item(2, ItemKind.TOOL_RESULT, "fco_1"), "result")) == b""


def test_every_chunk_is_valid_for_the_sdk_model() -> None:
    enc = encoder(include_usage=True, logprobs=True)
    item = Item(0, ItemKind.MESSAGE, "msg_1")
    out = wire(enc, ItemAdded(item)) + wire(enc, ItemDelta(item, "Foo", [FOO]))
    out += wire(enc, UsageReport(Usage(3, 1))) + wire(enc, Finished(FinishReason.STOP))
    for chunk in chunks(out):
        parsed = ChatCompletionChunk.model_validate(chunk)
        assert parsed.object == "chat.completion.chunk"
    assert ChatCompletionChunk.model_validate(chunks(out)[-1]).usage.total_tokens == 4


# --- non-streaming body ---------------------------------------------------------------------


def accumulate(events: list[Event]) -> Accumulator:
    acc = Accumulator()
    for event in events:
        acc.feed(event)
    return acc


MIXED_RAW: list[RawEvent] = [
    TextDelta(ItemKind.REASONING, "The user"),
    TextDelta(ItemKind.REASONING, " wants weather."),
    TextDelta(ItemKind.MESSAGE, "Checking", [FOO]),
    TextDelta(ItemKind.MESSAGE, " now.", [FOO]),
    ToolCallDelta(0, '{"location":', "call_a", "get_weather"),
    ToolCallDelta(0, ' "Paris"}'),
    ToolCallDelta(1, '{"location": "Rome"}', "call_b", "get_weather"),
    UsageReport(Usage(prompt_tokens=20, completion_tokens=7, cached_tokens=3, reasoning_tokens=2)),
    Finished(FinishReason.TOOL_CALLS),
]


async def test_completion_body_matches_the_streamed_result() -> None:
    events = await canonical(MIXED_RAW)
    body = completion_body(
        accumulate(events).result, completion_id=REF_ID, created=REF_CREATED, model=REF_MODEL, logprobs=True
    )
    # What the SDK accumulates from the stream of the same events ...
    streamed = sdk_final(encode_all(events, include_usage=True, logprobs=True), input_tools=[weather_tool()])
    # ... equals the non-streaming body, parsed by the SDK's own model.
    parsed = ChatCompletion.model_validate(body)
    s_msg, b_msg = streamed.choices[0].message, parsed.choices[0].message
    assert b_msg.content == s_msg.content == "Checking now."
    assert b_msg.refusal is s_msg.refusal is None
    assert b_msg.model_extra["reasoning_content"] == s_msg.model_extra["reasoning_content"]
    assert b_msg.model_extra["reasoning_content"] == "The user wants weather."
    assert [(c.id, c.function.name, c.function.arguments) for c in b_msg.tool_calls] == [
        (c.id, c.function.name, c.function.arguments) for c in s_msg.tool_calls
    ]
    assert [json.loads(c.function.arguments) for c in b_msg.tool_calls] == [
        {"location": "Paris"},
        {"location": "Rome"},
    ]
    assert parsed.choices[0].finish_reason == streamed.choices[0].finish_reason == "tool_calls"
    assert parsed.usage == streamed.usage
    assert parsed.usage.prompt_tokens_details.cached_tokens == 3
    assert parsed.usage.completion_tokens_details.reasoning_tokens == 2
    assert [lp.token for lp in b_msg_logprobs(parsed)] == [lp.token for lp in b_msg_logprobs(streamed)]


def b_msg_logprobs(completion: Any) -> list[Any]:
    return list(completion.choices[0].logprobs.content)


async def test_completion_body_shape() -> None:
    events = await canonical(TEXT_RAW)
    body = completion_body(
        accumulate(events).result, completion_id=REF_ID, created=REF_CREATED, model=REF_MODEL, logprobs=False
    )
    assert list(body) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "service_tier",
        "system_fingerprint",
    ]
    assert body["object"] == "chat.completion"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The capital of France is Paris.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"]["total_tokens"] == 33
    assert orjson.dumps(body)  # serializable as the route sends it


async def test_completion_body_refusal_and_reasoning_field() -> None:
    events = await canonical([TextDelta(ItemKind.REASONING, "no"), *REFUSAL_RAW])
    body = completion_body(
        accumulate(events).result,
        completion_id=REF_ID,
        created=REF_CREATED,
        model=REF_MODEL,
        logprobs=False,
        reasoning_field="both",
    )
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert message["refusal"] == "I'm sorry, but I cannot help with that request."
    assert message["reasoning_content"] == message["reasoning"] == "no"
    assert "tool_calls" not in message


async def test_completion_body_refusal_logprobs() -> None:
    events = await canonical([TextDelta(ItemKind.REFUSAL, "Foo", [FOO]), Finished(FinishReason.STOP)])
    body = completion_body(
        accumulate(events).result, completion_id=REF_ID, created=REF_CREATED, model=REF_MODEL, logprobs=True
    )
    assert body["choices"][0]["logprobs"] == {"content": None, "refusal": [FOO_JSON]}


# --- the scripted engine through segmenter, encoder and the SDK ------------------------------


async def test_scripted_engine_stream_is_sdk_compatible() -> None:
    script = parse_script(
        {
            "replies": [
                {
                    "reasoning": "Two cities, two calls.",
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"location": "Paris"}},
                        {"name": "get_weather", "arguments": {"location": "Rome"}},
                    ],
                }
            ]
        },
        "test",
    )
    engine = ScriptedEngine("scripted", script)
    request = ChatRequest(
        model="scripted",
        messages=[Message("user", "weather in Paris and Rome?")],
        tools=[ToolSpec("get_weather", parameters=weather_tool()["function"]["parameters"], strict=True)],
        sampling=SamplingParams(),
    )
    events = [event async for event in segment(engine.generate(request))]
    stream = encode_all(events, include_usage=True)
    final = sdk_final(stream, input_tools=[weather_tool()])
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.model_extra["reasoning_content"] == "Two cities, two calls."
    assert [c.function.name for c in message.tool_calls] == ["get_weather", "get_weather"]
    ids = [c.id for c in message.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert [c.function.parsed_arguments for c in message.tool_calls] == [
        {"location": "Paris"},
        {"location": "Rome"},
    ]
    assert final.usage is not None and final.usage.completion_tokens > 0
    # arguments really were streamed in more than one piece per call
    pieces = [d for d in deltas(stream) if "tool_calls" in d and "id" not in d["tool_calls"][0]]
    assert len(pieces) >= 4


def test_usage_reports_the_draft_tokens_as_prediction_tokens() -> None:
    body = usage_body(
        Usage(
            prompt_tokens=9, completion_tokens=40, accepted_prediction_tokens=31, rejected_prediction_tokens=6
        )
    )
    details = body["completion_tokens_details"]
    assert (details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]) == (31, 6)
    assert body["completion_tokens"] == 40  # drafts the model did not write are not its output


def test_usage_counts_the_prompts_audio_tokens() -> None:
    body = usage_body(Usage(prompt_tokens=60, completion_tokens=2, audio_tokens=50))
    assert body["prompt_tokens_details"] == {"cached_tokens": 0, "audio_tokens": 50}


async def test_return_progress_reports_the_prompt_as_llama_server_does() -> None:
    """`return_progress`: a `prompt_progress` chunk per report (the first saying what the cache
    held), no choices in it, so the SDK's accumulator reads the stream as it would without."""
    raw: list[RawEvent] = [
        PromptProgress(0.5, total=100, cached=20, processed=60),
        PromptProgress(1.0, total=100, cached=20, processed=100),
        TextDelta(ItemKind.MESSAGE, "Hi"),
        Finished(FinishReason.STOP),
    ]
    stream = await stream_bytes(raw, return_progress=True)
    reports = [c["prompt_progress"] for c in chunks(stream) if "prompt_progress" in c]
    assert [(r["total"], r["cache"], r["processed"]) for r in reports] == [
        (100, 20, 20),
        (100, 20, 60),
        (100, 20, 100),
    ]
    assert all(c["choices"] == [] for c in chunks(stream) if "prompt_progress" in c)
    assert sdk_final(stream).choices[0].message.content == "Hi"
    # not asked for, or an engine that gives no counts: no reports
    plain = await stream_bytes(raw)
    uncounted = await stream_bytes([PromptProgress(0.5), *raw[2:]], return_progress=True)
    assert not [c for c in chunks(plain) + chunks(uncounted) if "prompt_progress" in c]


def test_the_opening_deltas_written_out_are_orjsons() -> None:
    """The role chunk's three deltas are byte constants: each is what orjson made of its dict."""
    import orjson

    from sluicegate.dialects.chat_completions import encoder

    assert orjson.dumps({"role": "assistant", "content": ""}) == encoder._ROLE_MESSAGE
    assert orjson.dumps({"role": "assistant", "content": None, "refusal": ""}) == encoder._ROLE_REFUSAL
    assert orjson.dumps({"role": "assistant", "content": None}) == encoder._ROLE_NOTHING


@pytest.mark.parametrize(
    "usage",
    [
        Usage(),
        Usage(prompt_tokens=25, completion_tokens=8),
        Usage(1, 2, 3, 4, 5, 6, 7, 8),
        Usage(prompt_tokens=2**40, completion_tokens=123456789, cached_tokens=17, reasoning_tokens=90),
    ],
)
def test_the_finish_chunks_usage_written_out_is_orjsons(usage: Usage) -> None:
    """A stream's finish chunk writes its usage in one piece: what orjson made of `usage_body`."""
    from sluicegate.dialects.chat_completions.encoder import usage_bytes

    assert usage_bytes(usage) == orjson.dumps(usage_body(usage))
    encoder = ChatCompletionsEncoder("chatcmpl-1", 1, "m", include_usage=True, logprobs=False)
    encoder.encode(UsageReport(usage))
    *_, finish = encoder.encode(Finished(FinishReason.STOP))
    assert orjson.loads(finish.data)["usage"] == usage_body(usage)
