"""parsing: <think> reasoning and Hermes/Qwen <tool_call> markup, in adversarial chunkings."""

from __future__ import annotations

import orjson
import pytest

from parsing_support import M, R, collapse, make_parser, parse_all_ways, run
from sluicegate.core.events import ItemKind, TextDelta, TokenLogprob, ToolCallDelta
from sluicegate.parsing import THINK, ReasoningStyle, ToolCallFormat, new_parser

HERMES = {"tool_format": ToolCallFormat("hermes")}
THINKING = {"reasoning": THINK}
BOTH = {"tool_format": ToolCallFormat("hermes"), "reasoning": THINK}


def call(index: int, name: str, arguments: object) -> tuple[object, ...]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return ("call", index, f"call_{index}", name, args)


# --- reasoning ------------------------------------------------------------------------------


def test_think_then_answer_trims_whitespace_after_the_close_tag() -> None:
    text = "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4."
    assert parse_all_ways(text, **THINKING) == [(R, "\nLet me see: 2+2.\n"), (M, "It is 4.")]


def test_output_that_starts_inside_reasoning() -> None:
    text = "The user wants a number.</think>\n\n42"
    assert parse_all_ways(text, reasoning=THINK, starts_in_reasoning=True) == [
        (R, "The user wants a number."),
        (M, "42"),
    ]


def test_unterminated_reasoning_stays_reasoning_including_a_partial_close_tag() -> None:
    assert parse_all_ways("<think>still thinking </thi", **THINKING) == [(R, "still thinking </thi")]
    assert parse_all_ways("hmm", reasoning=THINK, starts_in_reasoning=True) == [(R, "hmm")]


def test_without_reasoning_configured_think_tags_are_text() -> None:
    text = "<think>x</think>y"
    assert parse_all_ways(text) == [(M, text)]


def test_similar_tags_and_comparisons_pass_through_as_text() -> None:
    for text in ("<thinking>deep</thinking> ok", "a < b and b > c", "<", "x <", "<thin", "1 <think"):
        assert parse_all_ways(text, **BOTH) == [(M, text)], text


def test_open_tag_after_message_text_is_text() -> None:
    text = "Use <think> tags like <think>this</think>."
    assert parse_all_ways(text, **THINKING) == [(M, text)]


def test_configurable_tags() -> None:
    style = ReasoningStyle(open_tag="<reasoning>", close_tag="</reasoning>")
    text = "<reasoning>hm</reasoning>ok <think>x</think>"
    assert parse_all_ways(text, reasoning=style) == [(R, "hm"), (M, "ok <think>x</think>")]


def test_close_tag_split_at_every_position() -> None:
    for i in range(len("</think>") + 1):
        chunks = ["<think>abc", "</think>"[:i], "</think>"[i:], "def"]
        assert collapse(run(chunks, **THINKING)) == [(R, "abc"), (M, "def")]


def test_plain_text_streams_without_delay_and_holds_only_a_possible_tag() -> None:
    parser = new_parser(ToolCallFormat("hermes"), reasoning=THINK)
    assert [e.text for e in parser.feed("Hello") if isinstance(e, TextDelta)] == ["Hello"]
    assert [e.text for e in parser.feed(" world <tool") if isinstance(e, TextDelta)] == [" world"]
    assert [e.text for e in parser.feed("box> done") if isinstance(e, TextDelta)] == [" <toolbox> done"]


# --- Hermes tool calls ----------------------------------------------------------------------

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>'


def test_one_call() -> None:
    result = parse_all_ways(WEATHER, **HERMES)
    assert result == [call(0, "get_weather", {"city": "Paris", "unit": "C"})]


def test_text_before_two_calls_and_text_after() -> None:
    second = '<tool_call>{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}</tool_call>'
    text = f"Let me check.\n\n{WEATHER}\n{second}\nDone."
    assert parse_all_ways(text, **HERMES) == [
        (M, "Let me check."),
        call(0, "get_weather", {"city": "Paris", "unit": "C"}),
        call(1, "get_time", {"tz": "Europe/Paris"}),
        (M, "Done."),
    ]


def test_reasoning_then_call() -> None:
    text = f"<think>\nneed weather\n</think>\n\n{WEATHER}"
    assert parse_all_ways(text, **BOTH) == [
        (R, "\nneed weather\n"),
        call(0, "get_weather", {"city": "Paris", "unit": "C"}),
    ]


def test_tool_call_inside_reasoning_is_reasoning() -> None:
    text = f"<think>maybe {WEATHER}?</think>no"
    assert parse_all_ways(text, **BOTH) == [(R, f"maybe {WEATHER}?"), (M, "no")]


def test_open_tag_split_at_every_position() -> None:
    tag = "<tool_call>"
    body = '{"name": "f", "arguments": {}}</tool_call>'
    for i in range(len(tag) + 1):
        for chunks in (["hi ", tag[:i], tag[i:] + body], ["hi " + tag[:i], tag[i:], body]):
            assert collapse(run(chunks, **HERMES)) == [(M, "hi"), call(0, "f", {})], chunks


def test_json_split_mid_string_and_mid_escape() -> None:
    text = (
        '<tool_call>{"name": "say", "arguments": {"text": "a \\"quoted\\" \\\\ \\u00e9 line\\n"}}</tool_call>'
    )
    ((kind, index, call_id, name, arguments),) = parse_all_ways(text, **HERMES)
    assert (kind, index, call_id, name) == ("call", 0, "call_0", "say")
    # Streamed as written (the model's own escapes), compact: the same JSON value.
    assert orjson.loads(arguments) == {"text": 'a "quoted" \\ é line\n'}


def test_a_close_tag_inside_a_json_string_is_part_of_the_argument() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"s": "a \\"</tool_call>\\" b"}}</tool_call>after'
    assert parse_all_ways(text, **HERMES) == [call(0, "f", {"s": 'a "</tool_call>" b'}), (M, "after")]


def test_a_close_tag_after_unbalanced_json_still_ends_the_call() -> None:
    # The arguments were complete (they streamed); the wrapper object was not.
    text = '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>Done.'
    assert parse_all_ways(text, **HERMES) == [call(0, "f", {"a": 1}), (M, "Done.")]
    text = '<tool_call>{"name": "f", "arguments": {"a": 1</tool_call>Done.'
    assert parse_all_ways(text, **HERMES) == [("call", 0, "call_0", "f", '{"a":1'), (M, "Done.")]


def test_arguments_are_re_serialized_as_compact_json() -> None:
    text = '<tool_call>\n{ "name" : "f",\n  "arguments" : { "a" : [1, 2] , "b": null } }\n</tool_call>'
    assert parse_all_ways(text, **HERMES) == [("call", 0, "call_0", "f", '{"a":[1,2],"b":null}')]


def test_arguments_given_as_a_json_string_pass_through() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert parse_all_ways(text, **HERMES) == [("call", 0, "call_0", "f", '{"a": 1}')]


def test_missing_arguments_are_an_empty_object() -> None:
    assert parse_all_ways('<tool_call>{"name": "now"}</tool_call>', **HERMES) == [call(0, "now", {})]


@pytest.mark.parametrize(
    ("body", "name"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Paris"', "get_weather"),  # unbalanced
        ('{"name": "get_weather", "arguments": {city: Paris}}', "get_weather"),  # not JSON
        ("get_weather(city='Paris')", ""),  # not JSON at all
        ('{"arguments": {"x": 1}}', ""),  # no name
        ("", ""),
    ],
)
def test_malformed_json_becomes_an_invalid_call_not_text(body: str, name: str) -> None:
    text = f"Checking.<tool_call>{body}</tool_call>"
    result = parse_all_ways(text, **HERMES)
    assert result[0] == (M, "Checking.")
    assert len(result) == 2 and result[1][:4] == ("call", 0, "call_0", name)
    if name:  # a known name: its arguments streamed, and must not pass for valid ones
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(result[1][4])
    else:  # no name to stream under: the raw text
        assert result[1][4] == body


def test_unterminated_call_at_finish() -> None:
    # Complete JSON but no close tag: the call stands.
    text = '<tool_call>{"name": "f", "arguments": {"a": 1}}\n</tool_c'
    assert parse_all_ways(text, **HERMES) == [call(0, "f", {"a": 1})]
    # Cut off mid-JSON: an invalid call with the raw text.
    text = '<tool_call>{"name": "f", "arguments": {"a": '
    assert parse_all_ways(text, **HERMES) == [("call", 0, "call_0", "f", '{"a":')]
    assert parse_all_ways("ok <tool_call>", **HERMES) == [(M, "ok"), ("call", 0, "call_0", "", "")]


def test_a_list_of_calls_in_one_tag() -> None:
    text = '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>'
    assert parse_all_ways(text, **HERMES) == [call(0, "a", {}), call(1, "b", {"x": 1})]


def test_similar_tags_are_text() -> None:
    for text in ("<tool_calls>x</tool_calls>", "see </tool_call> here", "a <tool_call b", "<tool_cal"):
        assert parse_all_ways(text, **HERMES) == [(M, text)], text


def test_saw_tool_calls_and_fresh_ids() -> None:
    parser = new_parser(ToolCallFormat("hermes"))
    events = parser.feed(WEATHER + WEATHER) + parser.finish()
    calls = [e for e in events if isinstance(e, ToolCallDelta) and e.call_id]  # each call's first delta
    assert parser.saw_tool_calls
    assert [c.index for c in calls] == [0, 1]
    assert all(c.call_id and c.call_id.startswith("call_") for c in calls)
    assert calls[0].call_id != calls[1].call_id
    assert not new_parser(ToolCallFormat("hermes")).saw_tool_calls


def test_whitespace_only_output_is_nothing_but_trailing_whitespace_of_text_is_kept() -> None:
    assert parse_all_ways("\n\n", **HERMES) == []
    assert parse_all_ways("Hi\n\n", **HERMES) == [(M, "Hi\n\n")]
    assert parse_all_ways("Hi\n\n", **THINKING) == [(M, "Hi\n\n")]


# --- logprobs -------------------------------------------------------------------------------


def lp(token: str) -> list[TokenLogprob]:
    return [TokenLogprob(token=token, logprob=-0.5, bytes=None)]


def test_logprobs_follow_the_text_that_carries_them() -> None:
    parser = make_parser(**BOTH)
    events = []
    for token in ["<think>", "hm", "</think>", "Hi", " <", "tool_call>", '{"name": "f"}', "</tool_call>"]:
        events += parser.feed(token, lp(token))
    events += parser.finish()
    texts = [
        (e.channel, e.text, [t.token for t in e.logprobs or []]) for e in events if isinstance(e, TextDelta)
    ]
    assert texts == [
        (ItemKind.REASONING, "hm", ["<think>", "hm"]),
        (ItemKind.MESSAGE, "Hi", ["</think>", "Hi"]),
    ]
    assert [e.name for e in events if isinstance(e, ToolCallDelta) and e.name is not None] == ["f"]
