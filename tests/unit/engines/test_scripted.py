"""engines/scripted.py: deterministic replies from a script, for people testing their clients."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluicegate.core.errors import EngineFailure, ErrorKind, SluicegateError
from sluicegate.core.events import (
    Finished,
    FinishReason,
    ItemKind,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.request import (
    ChatRequest,
    ContentPart,
    Message,
    RawPrompt,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from sluicegate.engines.base import ConfigError
from sluicegate.engines.scripted import (
    Reply,
    ScriptedEngine,
    _plan,
    demo_script,
    parse_script,
    prompt_tokens,
    rendered_prompt,
    words,
)

TOOL = ToolSpec("get_weather", parameters={"type": "object"})


def request(
    text: str = "hello",
    *,
    messages: list[Message] | None = None,
    tools: list[ToolSpec] | None = None,
    **sampling: Any,
) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=messages if messages is not None else [Message("user", text)],
        tools=tools or [],
        sampling=SamplingParams(**sampling),
    )


def engine(data: dict[str, Any]) -> ScriptedEngine:
    return ScriptedEngine("m", parse_script(data, "test script"))


async def generate(eng: ScriptedEngine, req: ChatRequest) -> list[RawEvent]:
    return [event async for event in eng.generate(req)]


def texts(events: list[RawEvent], channel: ItemKind) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta) and e.channel is channel]


# --- words ------------------------------------------------------------------------------------


def test_words_keep_their_leading_space() -> None:
    assert words("Hello big  world") == ["Hello", " big", "  world"]
    assert words(" lead") == [" lead"]
    assert words("trail ") == ["trail", " "]
    assert words("line\nbreak") == ["line", "\nbreak"]
    assert words("") == []


@given(st.text())
def test_words_concatenate_to_the_input(text: str) -> None:
    parts = words(text)
    assert "".join(parts) == text
    # each piece is whitespace then one run of non-space, except a trailing whitespace run
    for piece in parts[:-1]:
        assert piece.strip() and " " not in piece.lstrip() and not piece[-1].isspace()
    assert all(parts)


@given(st.lists(st.text(alphabet="abcXYZ.,!é", min_size=1), min_size=1))
def test_words_of_spaced_words_are_one_per_word(ws: list[str]) -> None:
    text = " ".join(ws)
    assert words(text) == [ws[0], *(" " + w for w in ws[1:])]


# --- matching -----------------------------------------------------------------------------------

MATCHING = {
    "replies": [
        {"when": {"last_role": "tool"}, "content": "tool result seen"},
        {"when": {"user_contains": "WEATHER"}, "content": "weather"},
        {"when": {"user_matches": r"^order #\d+$"}, "content": "order"},
        {"when": {"has_tools": True}, "content": "has tools"},
        {"when": {"user_contains": "weather", "has_tools": False}, "content": "shadowed"},
        {"content": "default"},
    ]
}


def reply_text(req: ChatRequest, data: dict[str, Any] = MATCHING) -> str:
    return parse_script(data, "t").pick(req).content


def test_last_role_matches_the_last_message() -> None:
    messages = [
        Message("user", "weather?"),
        Message("assistant", tool_calls=[ToolCall("call_1", "get_weather", "{}")]),
        Message("tool", "sunny", tool_call_id="call_1"),
    ]
    assert reply_text(request(messages=messages)) == "tool result seen"
    assert reply_text(request(messages=messages[:1])) == "weather"


def test_user_contains_is_a_case_insensitive_substring_of_the_last_user_text() -> None:
    assert reply_text(request("How is the Weather today?")) == "weather"
    messages = [Message("user", "weather?"), Message("assistant", "sunny"), Message("user", "thanks")]
    assert reply_text(request(messages=messages)) == "default"  # only the last user message counts


def test_user_matches_is_a_regex_search() -> None:
    assert reply_text(request("order #42")) == "order"
    assert reply_text(request("order #42 please")) == "default"


def test_tool_contains_looks_at_the_tool_results_since_the_last_user_message() -> None:
    data = {
        "replies": [
            {"when": {"tool_contains": "FAILED on purpose"}, "content": "recovering"},
            {"content": "default"},
        ]
    }
    call = Message("assistant", tool_calls=[ToolCall("c1", "f", "{}"), ToolCall("c2", "g", "{}")])
    failed = [Message("user", "go"), call, Message("tool", "ok", tool_call_id="c1")]
    failed.append(Message("tool", "tool failed on purpose: boom", tool_call_id="c2"))
    assert reply_text(request(messages=failed), data) == "recovering"
    assert reply_text(request(messages=[*failed, Message("user", "again")]), data) == "default"
    assert reply_text(request(messages=failed[:3]), data) == "default"


def test_has_tools() -> None:
    assert reply_text(request("hi", tools=[TOOL])) == "has tools"
    data = {"replies": [{"when": {"has_tools": False}, "content": "no tools"}, {"content": "default"}]}
    assert reply_text(request("hi"), data) == "no tools"
    assert reply_text(request("hi", tools=[TOOL]), data) == "default"


def test_first_match_wins_and_all_conditions_must_hold() -> None:
    # "weather" with tools matches reply 1 before the has_tools reply and the shadowed one
    assert reply_text(request("weather", tools=[TOOL])) == "weather"
    data = {
        "replies": [
            {"when": {"user_contains": "a", "has_tools": True}, "content": "both"},
            {"content": "default"},
        ]
    }
    assert reply_text(request("a"), data) == "default"
    assert reply_text(request("a", tools=[TOOL]), data) == "both"


def test_default_and_no_default() -> None:
    assert reply_text(request("nothing special")) == "default"
    script = parse_script({"replies": [{"when": {"user_contains": "x"}, "content": "x"}]}, "t")
    assert script.pick(request("y")) == Reply(content="")


def test_user_text_from_content_parts() -> None:
    from sluicegate.core.request import ContentPart

    message = Message("user", [ContentPart("text", text="what is the "), ContentPart("text", text="weather")])
    assert reply_text(request(messages=[message])) == "weather"


# --- plan: stop, max_tokens, ordering ------------------------------------------------------------


def test_plan_streams_reasoning_then_content_then_refusal_then_tools() -> None:
    reply = parse_script(
        {
            "replies": [
                {
                    "reasoning": "r1 r2",
                    "content": "c1 c2",
                    "refusal": "no",
                    "tool_calls": [{"name": "f", "arguments": {"a": 1}}],
                }
            ]
        },
        "t",
    ).replies[0]
    deltas, finish = _plan(reply, request())
    kinds = [d.channel if isinstance(d, TextDelta) else "tool" for d in deltas]
    assert kinds == [ItemKind.REASONING] * 2 + [ItemKind.MESSAGE] * 2 + [ItemKind.REFUSAL] + ["tool"] * 2
    assert finish is FinishReason.TOOL_CALLS


def test_plan_stop_sequence_cuts_content_and_drops_tool_calls() -> None:
    reply = Reply(content="Hello world. Goodbye now.", tool_calls=[])
    deltas, finish = _plan(reply, request(stop=["."]))
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["Hello", " world"]
    assert finish is FinishReason.STOP

    reply = parse_script(
        {"replies": [{"content": "Calling now STOP ignored", "tool_calls": [{"name": "f"}]}]}, "t"
    ).replies[0]
    deltas, finish = _plan(reply, request(stop=["STOP"]))
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Calling now "
    assert not any(isinstance(d, ToolCallDelta) for d in deltas)
    assert finish is FinishReason.STOP


def test_plan_stop_sequence_not_found_changes_nothing() -> None:
    deltas, finish = _plan(
        Reply(content="a b", finish_reason=FinishReason.CONTENT_FILTER), request(stop=["z"])
    )
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["a", " b"]
    assert finish is FinishReason.CONTENT_FILTER


def test_plan_earliest_of_several_stop_sequences_wins() -> None:
    deltas, _ = _plan(Reply(content="one two three four"), request(stop=["four", "two"]))
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "one "


def test_plan_max_tokens_gives_length() -> None:
    deltas, finish = _plan(Reply(reasoning="r1 r2", content="c1 c2 c3"), request(max_tokens=3))
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["r1", " r2", "c1"]
    assert finish is FinishReason.LENGTH
    deltas, finish = _plan(Reply(content="c1 c2 c3"), request(max_tokens=3))
    assert len(deltas) == 3
    assert finish is FinishReason.STOP  # exactly fits: not cut


async def test_max_tokens_through_generate_reports_length() -> None:
    events = await generate(engine({"replies": [{"content": "a b c d e"}]}), request(max_tokens=2))
    assert texts(events, ItemKind.MESSAGE) == ["a", " b"]
    assert events[-1] == Finished(FinishReason.LENGTH)


# --- generate -----------------------------------------------------------------------------------


async def test_generate_event_order_and_usage() -> None:
    eng = engine({"replies": [{"reasoning": "Let me think.", "content": "Hi there friend"}]})
    events = await generate(eng, request("hello there"))
    assert isinstance(events[0], PromptStarted)
    assert [e.progress for e in events[1:5] if isinstance(e, PromptProgress)] == [0.25, 0.5, 0.75, 1.0]
    assert isinstance(events[5], PromptFinished)
    # the prompt's cost is reported as soon as it is known, before any delta
    assert events[6] == UsageReport(Usage(prompt_tokens=2 + 4, completion_tokens=0))
    assert isinstance(events[7], TextDelta)
    assert texts(events, ItemKind.REASONING) == ["Let", " me", " think."]
    assert texts(events, ItemKind.MESSAGE) == ["Hi", " there", " friend"]
    assert events[-2] == UsageReport(
        Usage(prompt_tokens=2 + 4, completion_tokens=6, cached_tokens=0, reasoning_tokens=3)
    )
    assert events[-1] == Finished(FinishReason.STOP)
    # deterministic: the same request gives the same events
    assert await generate(eng, request("hello there")) == events


def test_prompt_tokens_count_words_messages_and_tools() -> None:
    req = request(messages=[Message("system", "be brief"), Message("user", "one two three")])
    assert prompt_tokens(req) == (2 + 4) + (3 + 4)
    with_tool = request(messages=[Message("user", "x")], tools=[ToolSpec("f", parameters={"type": "object"})])
    assert prompt_tokens(with_tool) == (1 + 4) + (len(words('{"type": "object"}')) + 8)


async def test_usage_overrides_from_the_script() -> None:
    eng = engine({"replies": [{"content": "a b", "usage": {"prompt_tokens": 100, "cached_tokens": 40}}]})
    usage = [e for e in await generate(eng, request()) if isinstance(e, UsageReport)]
    # the early report (after PromptFinished) has the overrides too; the final one follows
    assert usage == [
        UsageReport(Usage(prompt_tokens=100, completion_tokens=0, cached_tokens=40)),
        UsageReport(Usage(prompt_tokens=100, completion_tokens=2, cached_tokens=40)),
    ]


async def test_tool_call_arguments_stream_in_pieces_and_reassemble() -> None:
    arguments = {"city": "Paris", "units": "metric", "days": [1, 2]}
    eng = engine(
        {
            "replies": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": arguments, "id": "call_fixed"},
                        {"name": "get_time", "arguments": '{"tz": "CET"}'},
                    ]
                }
            ]
        }
    )
    events = await generate(eng, request("x", tools=[TOOL]))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    first = [c for c in calls if c.index == 0]
    second = [c for c in calls if c.index == 1]
    assert len(first) >= 3
    assert (first[0].call_id, first[0].name) == ("call_fixed", "get_weather")
    assert all(c.call_id is None and c.name is None for c in first[1:])  # name and id only once
    assert json.loads("".join(c.arguments for c in first)) == arguments
    assert (second[0].call_id, second[0].name) == (None, "get_time")  # no id: the core mints one
    assert json.loads("".join(c.arguments for c in second)) == {"tz": "CET"}
    assert events[-1] == Finished(FinishReason.TOOL_CALLS)


async def test_tool_call_without_arguments_sends_empty_object() -> None:
    events = await generate(engine({"replies": [{"tool_calls": [{"name": "ping"}]}]}), request())
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert "".join(c.arguments for c in calls) == "{}"
    assert calls[0].name == "ping"


async def test_tool_choice_none_suppresses_tool_calls() -> None:
    eng = engine({"replies": [{"content": "sure", "tool_calls": [{"name": "f"}]}]})
    req = request(tools=[ToolSpec("f")])
    req.tool_choice = "none"
    events = await generate(eng, req)
    assert not any(isinstance(e, ToolCallDelta) for e in events)
    assert texts(events, ItemKind.MESSAGE) == ["sure"]
    assert events[-1] == Finished(FinishReason.STOP)


async def test_tool_choice_none_keeps_the_rest_of_the_reply() -> None:
    eng = engine(
        {
            "replies": [
                {
                    "content": "one two three",
                    "tool_calls": [{"name": "f"}],
                    "usage": {"prompt_tokens": 99},
                    "error_after_deltas": 1,
                }
            ]
        }
    )
    req = request(tools=[ToolSpec("f")])
    req.tool_choice = "none"
    seen: list[RawEvent] = []
    with pytest.raises(EngineFailure):
        async for event in eng.generate(req):
            seen.append(event)
    assert texts(seen, ItemKind.MESSAGE) == ["one"]
    assert isinstance(seen[-1], UsageReport) and seen[-1].usage.prompt_tokens == 99


async def test_error_after_deltas_raises_after_n_deltas_with_usage_first() -> None:
    eng = engine({"replies": [{"content": "one two three four", "error_after_deltas": 2}]})
    seen: list[RawEvent] = []
    with pytest.raises(EngineFailure) as caught:
        async for event in eng.generate(request()):
            seen.append(event)
    assert texts(seen, ItemKind.MESSAGE) == ["one", " two"]
    assert isinstance(seen[-1], UsageReport)
    assert seen[-1].usage.completion_tokens == 2
    assert caught.value.code == "scripted_failure"
    assert "2" in str(caught.value)
    assert not any(isinstance(e, Finished) for e in seen)


async def test_error_after_zero_deltas_with_custom_message() -> None:
    eng = engine({"replies": [{"content": "x", "error_after_deltas": 0, "error_message": "overheated"}]})
    seen: list[RawEvent] = []
    with pytest.raises(EngineFailure, match=r"^overheated$"):
        async for event in eng.generate(request()):
            seen.append(event)
    assert not any(isinstance(e, TextDelta) for e in seen)
    assert isinstance(seen[-1], UsageReport)


async def test_logprobs_attached_when_requested() -> None:
    eng = engine({"replies": [{"reasoning": "hm", "content": "Héllo you", "tool_calls": [{"name": "f"}]}]})
    events = await generate(eng, request(logprobs=True, top_logprobs=2))
    text_deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.logprobs for d in text_deltas if d.channel is ItemKind.MESSAGE] == [
        [
            TokenLogprob(
                "Héllo", 0.0, list("Héllo".encode()), [TopLogprob("Héllo", 0.0, list("Héllo".encode()))]
            )
        ],
        [TokenLogprob(" you", 0.0, list(b" you"), [TopLogprob(" you", 0.0, list(b" you"))])],
    ]
    assert all(d.logprobs for d in text_deltas)


async def test_logprobs_without_top_and_not_requested() -> None:
    eng = engine({"replies": [{"content": "a b"}]})
    with_lp = [e for e in await generate(eng, request(logprobs=True)) if isinstance(e, TextDelta)]
    assert [d.logprobs for d in with_lp] == [
        [TokenLogprob("a", 0.0, [97], [])],
        [TokenLogprob(" b", 0.0, [32, 98], [])],
    ]
    without = [e for e in await generate(eng, request()) if isinstance(e, TextDelta)]
    assert all(d.logprobs is None for d in without)


async def test_refusal_streams_on_the_refusal_channel() -> None:
    events = await generate(engine({"replies": [{"refusal": "I can't help."}]}), request())
    assert texts(events, ItemKind.REFUSAL) == ["I", " can't", " help."]
    assert texts(events, ItemKind.MESSAGE) == []


def test_n_above_one_is_refused_with_param_n() -> None:
    eng = engine({"replies": [{"content": "x"}]})
    with pytest.raises(SluicegateError) as caught:
        eng.check(request(n=2))
    assert caught.value.info.kind is ErrorKind.INVALID_REQUEST
    assert caught.value.info.param == "n"
    eng.check(request(n=1))


def test_logit_bias_text_needs_a_tokenizer() -> None:
    """llama-server's text-keyed `logit_bias`: an engine without a tokenizer refuses it (the
    llamacpp engine tokenizes it: tests/unit/engines/llamacpp/test_llamacpp_sampler_chain.py)."""
    eng = engine({"replies": [{"content": "x"}]})
    with pytest.raises(SluicegateError) as caught:
        eng.check(request(logit_bias_text={"the": -100.0}))
    assert caught.value.info.param == "logit_bias"
    eng.check(request(logit_bias={5: -100.0}))


async def test_images_are_accepted_and_ignored() -> None:
    eng = engine({"replies": [{"content": "a cat"}]})
    assert eng.info().capabilities.vision is True  # so clients can test image input
    image = ContentPart("image", image_url="data:image/png;base64,iVBORw0KGgo=")
    with_image = request(messages=[Message("user", [ContentPart("text", text="what is this"), image])])
    eng.check(with_image)
    events = await generate(eng, with_image)
    assert texts(events, ItemKind.MESSAGE) == ["a", " cat"]
    # the image costs nothing: the prompt is counted as if it were not there
    assert events[-2] == UsageReport(
        Usage(prompt_tokens=prompt_tokens(request("what is this")), completion_tokens=2)
    )


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "a script must be a mapping"),
        ({"replies": [], "speed": 1}, "unknown script keys ['speed']"),
        ({"replies": {"content": "x"}}, "`replies` must be a list"),
        ({"token_delay_ms": -1, "replies": []}, "`token_delay_ms` must be a non-negative number"),
        ({"load_seconds": "slow", "replies": []}, "`load_seconds` must be a non-negative number"),
        ({"replies": ["hi"]}, "replies[0]: a reply must be a mapping"),
        ({"replies": [{"content": "x"}, {"contents": "x"}]}, "replies[1]: unknown reply keys ['contents']"),
        ({"replies": [{"content": 5}]}, "replies[0]: `content` must be a string"),
        ({"replies": [{"reasoning": ["a"]}]}, "replies[0]: `reasoning` must be a string"),
        ({"replies": [{"when": {"role": "user"}}]}, "replies[0]: `when` takes only"),
        ({"replies": [{"when": "always"}]}, "replies[0]: `when` takes only"),
        ({"replies": [{"when": {"user_matches": "(unclosed"}}]}, "replies[0]: `user_matches` is not a valid"),
        ({"replies": [{"when": {"user_contains": 5}}]}, "replies[0]: `when.user_contains` must be a string"),
        ({"replies": [{"when": {"has_tools": "yes"}}]}, "replies[0]: `when.has_tools` must be true or false"),
        ({"replies": [{"when": {"last_role": "tools"}}]}, "replies[0]: `when.last_role` must be one of"),
        ({"replies": [{"finish_reason": "done"}]}, "replies[0]: `finish_reason` must be one of stop, length"),
        ({"replies": [{"tool_calls": {"name": "f"}}]}, "replies[0]: `tool_calls` must be a list"),
        (
            {"replies": [{"tool_calls": [{"arguments": {}}]}]},
            "replies[0]: each tool call needs a string `name`",
        ),
        ({"replies": [{"tool_calls": [{"name": "f", "args": {}}]}]}, "unknown tool call keys ['args']"),
        ({"replies": [{"tool_calls": [{"name": "f", "id": 7}]}]}, "replies[0]: `id` must be a string"),
        ({"replies": [{"usage": {"tokens": 1}}]}, "replies[0]: `usage` takes only"),
        ({"replies": [{"usage": {"prompt_tokens": -1}}]}, "`prompt_tokens` must be a non-negative number"),
        ({"replies": [{"error_after_deltas": True}]}, "`error_after_deltas` must be a non-negative number"),
        ({"replies": [{"token_delay_ms": "fast"}]}, "replies[0]: `token_delay_ms` must be a non-negative"),
    ],
)
def test_script_validation_errors_name_the_place(data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_script(data, "my.yaml")
    message = str(caught.value)
    assert message.startswith("my.yaml")
    assert fragment in message


def test_valid_script_with_every_feature_parses() -> None:
    script = parse_script(
        {
            "token_delay_ms": 20,
            "first_token_delay_ms": 5,
            "load_seconds": 0.5,
            "replies": [
                {
                    "when": {
                        "last_role": "user",
                        "user_contains": "x",
                        "user_matches": "x+",
                        "has_tools": False,
                    },
                    "reasoning": "r",
                    "content": "c",
                    "refusal": "no",
                    "tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "call_1"}],
                    "finish_reason": "length",
                    "usage": {
                        "prompt_tokens": 1,
                        "completion_tokens": 2,
                        "cached_tokens": 0,
                        "reasoning_tokens": 1,
                    },
                    "error_after_deltas": 3,
                    "error_message": "boom",
                    "token_delay_ms": 1,
                    "first_token_delay_ms": 0,
                }
            ],
        },
        "t",
    )
    reply = script.replies[0]
    assert (script.token_delay_ms, script.first_token_delay_ms, script.load_seconds) == (20.0, 5.0, 0.5)
    assert reply.finish_reason is FinishReason.LENGTH
    assert reply.tool_calls[0].arguments == '{"a": 1}'
    assert reply.tool_calls[0].id == "call_1"
    assert (reply.token_delay_ms, reply.first_token_delay_ms) == (1.0, 0.0)
    assert reply.error_after_deltas == 3


def test_demo_script_parses_and_has_a_default() -> None:
    script = demo_script()
    assert script.replies
    assert script.pick(request("something unrelated")).content


# --- config, files and reloading -------------------------------------------------------------


def write(path: Path, text: str, bump: int = 0) -> None:
    path.write_text(text, encoding="utf-8")
    if bump:  # make sure the change is visible even on filesystems with coarse timestamps
        st_ = path.stat()
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + bump * 1_000_000_000))


async def test_script_file_is_resolved_against_base_dir_and_reloaded(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    write(script, "replies:\n  - content: first version\n")
    eng = ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": "script.yaml"}, tmp_path)
    assert eng.path == tmp_path / "script.yaml"
    req = request()
    eng.check(req)
    assert "".join(texts(await generate(eng, req), ItemKind.MESSAGE)) == "first version"

    write(script, "replies:\n  - content: second version\n", bump=5)
    eng.check(req)
    assert "".join(texts(await generate(eng, req), ItemKind.MESSAGE)) == "second version"

    # a broken edit fails the request clearly and keeps the last good script
    write(script, "replies:\n  - contents: typo\n", bump=10)
    with pytest.raises(SluicegateError) as caught:
        eng.check(req)
    assert caught.value.info.kind is ErrorKind.ENGINE
    assert caught.value.info.code == "script_error"
    assert "contents" in caught.value.info.message
    assert "".join(texts(await generate(eng, req), ItemKind.MESSAGE)) == "second version"
    # ... and keeps failing until fixed
    with pytest.raises(SluicegateError):
        eng.check(req)

    write(script, "replies:\n  - content: fixed\n", bump=15)
    eng.check(req)
    assert "".join(texts(await generate(eng, req), ItemKind.MESSAGE)) == "fixed"

    script.unlink()
    with pytest.raises(SluicegateError) as gone:
        eng.check(req)
    assert gone.value.info.kind is ErrorKind.ENGINE


def test_invalid_yaml_syntax_after_edit(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    write(script, "replies: []\n")
    eng = ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": str(script)}, Path("/"))
    write(script, "replies: [\n", bump=5)
    with pytest.raises(SluicegateError, match="not valid YAML"):
        eng.check(request())


async def test_json_script(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    write(script, json.dumps({"replies": [{"content": "from json"}]}))
    eng = ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": "s.json"}, tmp_path)
    assert "".join(texts(await generate(eng, request()), ItemKind.MESSAGE)) == "from json"
    bad = tmp_path / "bad.json"
    write(bad, "{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": "bad.json"}, tmp_path)


def test_from_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown keys \['speed'\]"):
        ScriptedEngine.from_config({"id": "m", "engine": "scripted", "speed": 1}, tmp_path)
    with pytest.raises(ConfigError, match="cannot read script"):
        ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": "missing.yaml"}, tmp_path)
    with pytest.raises(ConfigError, match="`script` must be a string"):
        ScriptedEngine.from_config({"id": "m", "engine": "scripted", "script": 3}, tmp_path)


def test_without_script_the_demo_is_used() -> None:
    eng = ScriptedEngine.from_config({"id": "demo", "engine": "scripted"}, Path("."))
    assert eng.path is None
    assert eng.script == demo_script()
    eng.check(request())  # nothing to reload
    info = eng.info()
    assert info.id == "demo" and info.engine == "scripted"


async def test_load_reports_progress() -> None:
    eng = engine({"load_seconds": 0, "replies": []})
    progress: list[float] = []
    await eng.load(progress.append)
    assert progress == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert ScriptedEngine.needs_load is True


@pytest.mark.parametrize("effort", ["off", "none"])
async def test_reasoning_turned_off(effort: str) -> None:
    eng = engine({"replies": [{"reasoning": "hidden thoughts", "content": "answer"}]})
    req = request()
    req.reasoning_effort = effort
    events = await generate(eng, req)
    assert texts(events, ItemKind.REASONING) == []
    assert texts(events, ItemKind.MESSAGE) == ["answer"]
    usage = [e for e in events if isinstance(e, UsageReport)][-1]  # the final report
    assert usage.usage == Usage(prompt_tokens=prompt_tokens(req), completion_tokens=1, reasoning_tokens=0)
    req.reasoning_effort = "low"
    assert texts(await generate(eng, req), ItemKind.REASONING) == ["hidden", " thoughts"]


async def test_completion_is_text_only_with_echo_and_the_fim_layout() -> None:
    script = parse_script(
        {"replies": [{"reasoning": "hmm", "content": "a + b", "tool_calls": [{"name": "f"}]}]}, "t"
    )
    engine = ScriptedEngine("s", script)
    request = ChatRequest(model="s", messages=[], prompt=RawPrompt("return ", echo=True))
    engine.check(request)
    events = [e async for e in engine.generate(request)]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert all(d.channel is ItemKind.MESSAGE for d in deltas)
    assert "".join(d.text for d in deltas) == "return a + b"
    assert not any(isinstance(e, ToolCallDelta) for e in events)

    echo = ScriptedEngine("s", parse_script({"replies": [{"echo_prompt": True}]}, "t"))
    fim = ChatRequest(model="s", messages=[], prompt=RawPrompt("def f(", suffix=")"))
    text = "".join(e.text for e in [e async for e in echo.generate(fim)] if isinstance(e, TextDelta))
    assert (
        text
        == "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>"
    )


def test_the_echoed_prompt_marks_each_image() -> None:
    """What `echo_prompt` answers: an image shows as a marker beside its message's text."""
    picture = ContentPart("image", image_url="data:image/png;base64,iVBORw0KGgo=")
    req = ChatRequest(
        model="m",
        messages=[
            Message("user", [ContentPart("text", text="What is this?"), picture]),
            Message("assistant", "A picture."),
            Message("user", [picture]),
        ],
    )
    assert rendered_prompt(req) == (
        "user: What is this? [image data:image/png;base64,]\n"
        "assistant: A picture.\n"
        "user:  [image data:image/png;base64,]"
    )


async def test_speech_tasks_say_the_reply_a_word_at_a_time_and_fail_on_demand() -> None:
    from sluicegate.core.speech import Segment, SpeechRequest, Transcribed, TranscriptionRequest

    script = parse_script(
        {
            "replies": [
                {"when": {"user_contains": "fail"}, "content": "a b c", "error_after_deltas": 2},
                {"content": "hi there"},
            ]
        },
        "test script",
    )
    eng = ScriptedEngine("m", script, tasks=frozenset({"transcription", "speech"}))
    heard = [e async for e in eng.transcribe(TranscriptionRequest("m", b"", 3.0))]
    assert [e.text for e in heard if isinstance(e, Segment)] == ["hi", " there"]
    assert heard[-1] == Transcribed("en", 3.0)
    spoken: list[str] = []
    with pytest.raises(EngineFailure):
        async for voiced in eng.synthesize(SpeechRequest("m", "please fail")):
            spoken.append(voiced.text)
    assert spoken == ["a", " b"] and [v.id for v in eng.voices()] == ["scripted"]
    with pytest.raises(SluicegateError):  # a task it was not given
        engine({"replies": []}).transcribe(TranscriptionRequest("m", b"", 1.0))
