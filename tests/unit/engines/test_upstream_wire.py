"""wire.py: every shape real upstreams send becomes the right raw events.

Frames are built by the fake upstream's own helpers, so these tests and the e2e tests feed the
decoder the same bytes a real vLLM / llama-server stream has.
"""

from __future__ import annotations

from typing import Any

from fake_upstream import DONE, chunk, text_stream, usage

from sluicegate.core.errors import ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    PromptProgress,
    RawEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.engines.upstream.wire import ChunkDecoder, SSEReader


def decode(frames: list[bytes], *, end: bool = True, split: int | None = None) -> list[RawEvent]:
    """Run bytes through reader and decoder, optionally re-split every `split` bytes."""
    data = b"".join(frames)
    pieces = [data[i : i + split] for i in range(0, len(data), split)] if split else [data]
    reader, decoder = SSEReader(), ChunkDecoder()
    events: list[RawEvent] = []
    for piece in pieces:
        for name, payload in reader.feed(piece):
            events += decoder.frame(name, payload)
    if end:
        for name, payload in reader.close():
            events += decoder.frame(name, payload)
        events += decoder.end()
    return events


def texts(events: list[RawEvent], channel: ItemKind) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.channel is channel)


def test_content_usage_and_finish_in_vllm_shape() -> None:
    events = decode([*text_stream(["Hel", "lo"], use=usage(7, 2, cached=3)), DONE])
    assert texts(events, ItemKind.MESSAGE) == "Hello"
    assert [type(e) for e in events] == [TextDelta, TextDelta, Finished, UsageReport]
    report = events[-1]
    assert isinstance(report, UsageReport)
    assert (report.usage.prompt_tokens, report.usage.completion_tokens, report.usage.cached_tokens) == (
        7,
        2,
        3,
    )


def test_byte_by_byte_delivery_and_crlf_lines_decode_the_same() -> None:
    frames = [*text_stream(["a", "é", "c"]), DONE]
    whole = decode(frames)
    assert decode(frames, split=1) == whole
    crlf = [f.replace(b"\n", b"\r\n") for f in frames]
    assert decode(crlf, split=3) == whole


def test_reasoning_in_either_field_and_reasoning_tokens() -> None:
    frames = [
        chunk({"role": "assistant", "content": None}),
        chunk({"reasoning_content": "Let me"}),
        chunk({"reasoning": " think."}),
        chunk({"content": "42"}),
        chunk(finish_reason="stop", usage=usage(5, 9, reasoning=6)),  # usage on the finish chunk
        DONE,
    ]
    events = decode(frames)
    assert texts(events, ItemKind.REASONING) == "Let me think."
    assert texts(events, ItemKind.MESSAGE) == "42"
    report = events[-1]
    assert isinstance(report, UsageReport) and report.usage.reasoning_tokens == 6


def test_a_field_sent_under_both_names_counts_once() -> None:
    events = decode([chunk({"reasoning_content": "x", "reasoning": "x"}), chunk(finish_reason="stop"), DONE])
    assert texts(events, ItemKind.REASONING) == "x"


def test_usage_on_every_chunk_reports_only_the_last() -> None:
    frames = [
        chunk({"content": "a"}, usage=usage(3, 1)),
        chunk({"content": "b"}, usage=usage(3, 2)),
        chunk(finish_reason="length", usage=usage(3, 2)),
        chunk(choices=False, usage=usage(3, 2)),
        DONE,
    ]
    events = decode(frames)
    reports = [e for e in events if isinstance(e, UsageReport)]
    assert len(reports) == 1 and reports[0].usage.completion_tokens == 2
    assert Finished(FinishReason.LENGTH) in events


def tool_deltas(events: list[RawEvent]) -> list[tuple[int, str, str | None, str | None]]:
    return [(e.index, e.arguments, e.call_id, e.name) for e in events if isinstance(e, ToolCallDelta)]


def test_tool_calls_by_index_with_id_and_name_once() -> None:
    frames = [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),  # empty delta: nothing
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "put", "arguments": "{}"},
                    }
                ]
            }
        ),
        chunk(finish_reason="tool_calls"),
        DONE,
    ]
    events = decode(frames)
    assert tool_deltas(events) == [
        (0, "", "call_a", "get"),
        (0, '{"q":', None, None),
        (0, "1}", None, None),
        (1, "{}", "call_b", "put"),
    ]
    assert Finished(FinishReason.TOOL_CALLS) in events


def test_tool_calls_without_ids_with_repeated_names_and_arguments_at_the_end() -> None:
    frames = [
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get", "arguments": '{"a":1}'}}]}),
        chunk(finish_reason="tool_calls"),
        DONE,
    ]
    assert tool_deltas(decode(frames)) == [
        (0, "", None, "get"),
        (0, "", None, "get"),
        (0, '{"a":1}', None, "get"),
    ]


def test_tool_calls_without_index_are_told_apart_by_id() -> None:
    frames = [
        chunk(
            {
                "tool_calls": [
                    {"id": "c1", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "c2", "function": {"name": "b", "arguments": {"x": 1}}},  # arguments as an object
                ]
            }
        ),
        chunk(finish_reason="tool_calls"),
        DONE,
    ]
    assert tool_deltas(decode(frames)) == [(0, "{}", "c1", "a"), (1, '{"x":1}', "c2", "b")]


def test_legacy_function_call_delta() -> None:
    frames = [
        chunk({"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": ""}}),
        chunk({"function_call": {"arguments": '{"id":'}}),
        chunk({"function_call": {"arguments": "3}"}}),
        chunk(finish_reason="function_call"),
        DONE,
    ]
    events = decode(frames)
    assert tool_deltas(events) == [(0, "", None, "lookup"), (0, '{"id":', None, None), (0, "3}", None, None)]
    assert Finished(FinishReason.TOOL_CALLS) in events


def test_refusal_and_its_logprobs() -> None:
    entry: dict[str, Any] = {"token": "No", "logprob": -0.5, "bytes": [78, 111], "top_logprobs": []}
    frames = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "No"}, logprobs={"content": None, "refusal": [entry]}),
        chunk(finish_reason="stop"),
        DONE,
    ]
    events = decode(frames)
    refusal = [e for e in events if isinstance(e, TextDelta)]
    assert len(refusal) == 1 and refusal[0].channel is ItemKind.REFUSAL
    assert refusal[0].logprobs is not None and refusal[0].logprobs[0].logprob == -0.5


def test_content_logprobs_with_top_alternatives() -> None:
    entry = {
        "token": "Hi",
        "logprob": -0.1,
        "bytes": [72, 105],
        "top_logprobs": [
            {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]},
            {"token": "Yo", "logprob": -2.5, "bytes": None},
        ],
    }
    events = decode(
        [
            chunk({"content": "Hi"}, logprobs={"content": [entry], "refusal": None}),
            chunk(finish_reason="stop"),
            DONE,
        ]
    )
    delta = events[0]
    assert isinstance(delta, TextDelta) and delta.logprobs is not None
    assert delta.logprobs[0].token == "Hi"
    assert [t.token for t in delta.logprobs[0].top] == ["Hi", "Yo"]


def test_error_frame_in_data_ends_the_stream_with_the_upstream_message() -> None:
    frames = [
        chunk({"content": "partial"}),
        b'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}\n\n',
        DONE,
        chunk({"content": "ignored"}),
    ]
    events = decode(frames)
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.error.kind is ErrorKind.UPSTREAM and "CUDA out of memory" in failed.error.message
    assert texts(events, ItemKind.MESSAGE) == "partial"


def test_event_error_frame_and_old_llama_error_lines() -> None:
    named = decode([chunk({"content": "a"}), b'event: error\ndata: {"message":"slot crashed"}\n\n'])
    assert isinstance(named[-1], Failed) and "slot crashed" in named[-1].error.message
    old = decode([b'error: {"code":500,"message":"llama decode failed","type":"server_error"}\n\n'])
    assert isinstance(old[-1], Failed) and "llama decode failed" in old[-1].error.message


def test_vllm_old_error_object_and_usage_before_the_failure() -> None:
    frames = [
        chunk({"content": "a"}, usage=usage(4, 1)),
        b'data: {"object":"error","message":"bad things","type":"BadRequestError","param":null,"code":400}\n\n',
    ]
    events = decode(frames, end=False)
    assert isinstance(events[-2], UsageReport)
    assert isinstance(events[-1], Failed) and events[-1].error.kind is ErrorKind.INVALID_REQUEST


def test_end_without_done_after_a_finish_reason_is_fine() -> None:
    events = decode(text_stream(["ok"]))
    assert not any(isinstance(e, Failed) for e in events)
    assert isinstance(events[-1], UsageReport)


def test_end_without_done_before_a_finish_reason_fails() -> None:
    events = decode([chunk({"content": "cut"})])
    assert isinstance(events[-1], Failed)
    assert events[-1].error.code == "upstream_closed_early"


def test_last_frame_without_blank_line_still_counts() -> None:
    events = decode([chunk({"content": "x"}), chunk(finish_reason="stop")[:-2]])
    assert Finished(FinishReason.STOP) in events and not any(isinstance(e, Failed) for e in events)


def test_not_json_is_a_failure_not_an_exception() -> None:
    events = decode([b"data: {oops\n\n"], end=False)
    assert isinstance(events[-1], Failed) and "not JSON" in events[-1].error.message


def test_llama_server_prompt_progress_and_comments() -> None:
    frames = [
        b": keep-alive\n\n",
        chunk(
            {"role": "assistant", "content": None},
            extra={"prompt_progress": {"total": 200, "cache": 0, "processed": 50}},
        ),
        chunk({"content": "x"}),
        chunk(finish_reason="stop"),
        DONE,
    ]
    events = decode(frames)
    assert events[0] == PromptProgress(0.25, total=200, cached=0, processed=50)  # relayed as counted


def test_nothing_after_done_is_decoded() -> None:
    reader, decoder = SSEReader(), ChunkDecoder()
    events: list[RawEvent] = []
    for name, payload in reader.feed(b"".join([*text_stream(["a"]), DONE, chunk({"content": "late"})])):
        events += decoder.frame(name, payload)
    assert decoder.done and texts(events, ItemKind.MESSAGE) == "a"
    assert decoder.end() == []


def test_think_tags_in_content_become_reasoning_when_configured() -> None:
    from sluicegate.parsing import THINK, OutputParser

    frames = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "<thi"}),
        chunk({"content": "nk>Plan it"}),
        chunk({"content": ".</think>\n\nAnswer"}),
        chunk({"content": " <think> stays"}),
        chunk(finish_reason="stop"),
        DONE,
    ]
    reader, decoder = SSEReader(), ChunkDecoder(OutputParser(reasoning=THINK))
    events: list[RawEvent] = []
    for name, payload in reader.feed(b"".join(frames)):
        events += decoder.frame(name, payload)
    events += decoder.end()
    assert texts(events, ItemKind.REASONING) == "Plan it."
    assert texts(events, ItemKind.MESSAGE) == "Answer <think> stays"
    assert texts(decode(frames), ItemKind.MESSAGE).startswith("<think>Plan it.</think>")  # not configured


def test_the_reader_fast_paths_agree_with_its_line_by_line_path() -> None:
    """A read of whole frames takes a shortcut (one `data:` line per frame); whatever the bytes,
    it gives what the general path gives them — which a reader holding a partial line takes."""
    reads = [
        b'data: {"a":1}\n\n',
        b'data: {"a":1}\r\n\r\n',
        b'data: {"a":"x\\ry"}\r\n\n',
        b"data: a\rdata: b\n\n",
        b"data:tight\n\n",
        b"data: one\ndata: two\n\n",
        b"event: ping\ndata: {}\n\n",
        b": comment\n\n",
        b"data: 1\n\ndata: 2\n\n",
        b"data: 1\n\ndata: 2\r\n\r\n",
        b"data: 1\n\nevent: e\ndata: 2\n\n",
        b"id: 7\n\n",
        b"\n\n",
    ]
    for read in reads:
        shortcut = SSEReader().feed(read)
        general = SSEReader()
        assert general.feed(b":") == []  # a partial line held: the next read cannot take a shortcut
        assert general.feed(b"\n" + read) == shortcut, read


_HEAD = b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
_ROLE = (
    _HEAD
    + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
)


def _parses_recorded(monkeypatch: Any) -> list[bytes] | None:
    """What the decoder hands `orjson.loads` from here on; None in the compiled build, where
    orjson is bound in the binary and the patch cannot reach it."""
    import sluicegate.engines.upstream.wire as wire

    if not hasattr(wire.ChunkDecoder.frame, "__code__"):
        return None
    parsed: list[bytes] = []
    real = wire.orjson.loads

    def loads(data: bytes) -> Any:
        parsed.append(bytes(data))
        return real(data)

    monkeypatch.setattr(wire.orjson, "loads", loads)
    monkeypatch.setattr(wire, "_loads", loads)  # the token's chunk's (a `Final`: a static compiled)
    return parsed


def test_the_role_chunk_in_vllms_shape_is_read_without_parsing_it(monkeypatch: Any) -> None:
    """A stream's opening chunk (role, empty content, nothing more) comes to no event: it is
    recognised from its bytes, as a token's chunk is, and its head serves the tokens after it."""
    parsed = _parses_recorded(monkeypatch)
    if parsed is None:
        return  # compiled: orjson is bound in the binary (the pure run checks the count)
    decoder = ChunkDecoder()
    assert decoder.frame(None, _ROLE) == []
    assert parsed == []
    token = _HEAD + b'"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}'
    assert decoder.frame(None, token) == [TextDelta(ItemKind.MESSAGE, "Hi")]
    assert parsed == [b'"Hi"']  # the string alone: the head learnt from the role chunk


def test_role_chunks_that_say_more_are_parsed_whole() -> None:
    role_at = b'"choices":[{"index":0,"delta":{"role":"assistant","content":'
    tail = b'},"logprobs":null,"finish_reason":null}]}'
    cases = {
        _HEAD + role_at + b'"Hi"' + tail: [TextDelta(ItemKind.MESSAGE, "Hi")],
        _HEAD + role_at + b'"","refusal":"no"' + tail: [TextDelta(ItemKind.REFUSAL, "no")],
        _HEAD + role_at + b'"","reasoning_content":"hm"' + tail: [TextDelta(ItemKind.REASONING, "hm")],
        _HEAD + role_at + b'""},"logprobs":null,"finish_reason":"stop"}]}': [Finished(FinishReason.STOP)],
        _HEAD[:-1] + b',"prompt_progress":{"total":4,"processed":4,"cache":0},' + role_at + b'""' + tail: [
            PromptProgress(1.0, processed=4, total=4, cached=0)
        ],
    }
    for data, events in cases.items():
        assert ChunkDecoder().frame(None, data) == events, data
    # usage in the head: kept for the end (parsed whole, not dropped)
    decoder = ChunkDecoder()
    with_usage = _HEAD[:-1] + b',"usage":{"prompt_tokens":3,"completion_tokens":0},' + role_at + b'""' + tail
    assert decoder.frame(None, with_usage) == []
    assert decoder.usage == {"prompt_tokens": 3, "completion_tokens": 0}


_TOKEN = _HEAD + b'"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}'
_FINISH = (
    _HEAD
    + b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}]}'
)
_USAGE = _HEAD + b'"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10}}'


def test_the_last_chunks_in_vllms_shape_are_read_without_parsing_them_whole(monkeypatch: Any) -> None:
    """The finish chunk (an empty text, a known reason) and the usage chunk come to what parsing
    them would: recognised from the stream's head and a token's tail, only usage's object parsed."""
    parsed = _parses_recorded(monkeypatch)
    if parsed is None:
        return  # compiled: orjson is bound in the binary (the pure run checks the count)
    decoder = ChunkDecoder()
    assert decoder.frame(None, _ROLE) == []
    assert decoder.frame(None, _TOKEN) == [TextDelta(ItemKind.MESSAGE, "Hi")]
    assert decoder.frame(None, _FINISH) == [Finished(FinishReason.LENGTH)]
    assert decoder.frame(None, _USAGE) == []
    assert parsed == [b'"Hi"', b'{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10}']
    assert decoder.frame(None, b"[DONE]") == [UsageReport(Usage(prompt_tokens=8, completion_tokens=2))]


def test_last_chunks_read_from_their_bytes_decode_as_parsed_whole() -> None:
    """Every near miss of the two shapes, after a token taught the decoder its head, decodes
    exactly as a decoder that knows no head (which parses each chunk whole)."""
    finish_at = _HEAD + b'"choices":[{"index":0,"delta":{"content":'
    cases = [
        _FINISH,
        finish_at + b'""},"logprobs":null,"finish_reason":"stop"}]}',
        finish_at + b'""},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}',
        finish_at + b'""},"finish_reason":"content_filter"}]}',
        finish_at + b'"."},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}',  # a text too
        finish_at + b'""},"logprobs":null,"finish_reason":"abort","stop_reason":null}]}',  # unknown reason
        finish_at + b'""},"logprobs":null,"finish_reason":"stop","stop_reason":"</s>"}]}',
        finish_at + b'""},"logprobs":null,"finish_reason":"stop\\u0020","stop_reason":null}]}',
        finish_at + b'""},"logprobs":{"content":[]},"finish_reason":"stop"}]}',
        finish_at + b'""},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}',
        finish_at + b'"", "x":1},"logprobs":null,"finish_reason":"stop"}]}',
        _USAGE,
        _HEAD + b'"choices":[],"usage":{}}',
        _HEAD + b'"choices":[],"usage":{"prompt_tokens":8},"x":{}}',
        _HEAD + b'"choices":[],"usage":{"prompt_tokens":8}},{}}',
        _HEAD + b'"choices":[],"usage":{"prompt_tokens":8,"prompt_tokens_details":null}}',
        _HEAD[:-1] + b',"x":2,' + b'"choices":[],"usage":{"prompt_tokens":8}}',  # another head
    ]
    for data in cases:
        learnt = ChunkDecoder()
        assert learnt.frame(None, _TOKEN) == [TextDelta(ItemKind.MESSAGE, "Hi")]
        whole = ChunkDecoder()
        assert learnt.frame(None, data) == whole.frame(None, data), data
        assert (learnt.finish, learnt.usage, learnt.over) == (whole.finish, whole.usage, whole.over), data


def test_the_finish_chunk_read_from_its_bytes_ends_the_content_parser() -> None:
    """A content parser's held text comes out before the finish, as parsing the chunk whole does."""

    class Held:
        def feed(self, text: str, logprobs: Any) -> list[RawEvent]:
            return []

        def finish(self) -> list[RawEvent]:
            return [TextDelta(ItemKind.MESSAGE, "held")]

    decoder = ChunkDecoder(Held())
    decoder.frame(None, _TOKEN)
    assert decoder.frame(None, _FINISH) == [
        TextDelta(ItemKind.MESSAGE, "held"),
        Finished(FinishReason.LENGTH),
    ]


def test_a_text_completions_last_chunks_decode_as_parsed_whole() -> None:
    """The same for `/completions` chunks (vLLM's `text_completion` shape)."""
    from sluicegate.engines.upstream.completions import CompletionChunkDecoder

    head = b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
    at = head + b'"choices":[{"index":0,"text":'
    token = at + b'"Hi","logprobs":null,"finish_reason":null,"stop_reason":null}]}'
    cases = [
        at + b'"","logprobs":null,"finish_reason":"length","stop_reason":null}]}',
        at + b'"!","logprobs":null,"finish_reason":"stop","stop_reason":null}]}',
        head + b'"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10}}',
    ]
    for data in cases:
        learnt = CompletionChunkDecoder()
        assert learnt.frame(None, token) == [TextDelta(ItemKind.MESSAGE, "Hi")]
        whole = CompletionChunkDecoder()
        assert learnt.frame(None, data) == whole.frame(None, data), data
        assert (learnt.finish, learnt.usage) == (whole.finish, whole.usage), data
    learnt = CompletionChunkDecoder()
    learnt.frame(None, token)
    assert learnt.frame(None, cases[0]) == [Finished(FinishReason.LENGTH)]
