# ruff: noqa: RUF001  (DeepSeek's DSML token is written with full-width bars on purpose)
"""The families added after the first nineteen (DeepSeek V3.2/V4 DSML, Kimi K3, MiniMax M3,
MiniCPM 5, GigaChat 3, Apriel, Command R+, Firefunction v2, Llama 4 pythonic, Hy3, Muse Glimmer): one call parses
the same whole and a character at a time, arguments stream where the format allows, no special
token reaches the message, and a cut-off or malformed call is a call whose arguments are not
JSON (the dialects' invalid call), never an exception."""

from __future__ import annotations

import json

import pytest

from llama_cpp_support import fold
from parsing_support import run
from sluicegate.core.events import RawEvent, TextDelta, ToolCallDelta
from sluicegate.parsing import ToolCallFormat, detect_tool_format, new_parser
from sluicegate.parsing.registry import family_named

SCHEMA: dict[str, dict[str, object]] = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
}
NS = "]<]minimax[>["
F = ToolCallFormat
# family -> output with one call of get_weather {"city": "Paris", "days": 3}
OUTPUTS: dict[ToolCallFormat, str] = {
    F(
        "deepseek_v3_2"
    ): '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
    F(
        "deepseek_v4"
    ): '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    F(
        "kimi_k3"
    ): '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>',
    F(
        "minimax_m3"
    ): f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</city>{NS}<days>3{NS}</days>{NS}</invoke>\n{NS}</tool_call>',
    F(
        "minicpm5"
    ): '<function name="get_weather"><param name="city"><![CDATA[Paris]]></param><param name="days">3</param></function>',
    F(
        "gigachat3"
    ): '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
    F(
        "apriel"
    ): '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]</tool_calls>',
    F(
        "command_r_plus"
    ): 'Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}}]\n```',
    F("firefunction_v2"): ' functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    F("llama4_pythonic"): '[get_weather(city="Paris", days=3)]',
    F(
        "solar_open"
    ): '<|tool_calls|><|tool_call:begin|>call_1<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris", "days": 3}<|tool_call:end|><|calls|>',
    F(
        "minimax_m1"
    ): '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_calls>',
    F(
        "hy3"
    ): "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>3</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
    F(
        "muse_glimmer"
    ): '<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n<atem:parameter name="days">3</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>',
}
WHOLE: set[ToolCallFormat] = set()  # formats whose arguments leave in one piece
TEXT_FIRST = {F("llama4_pythonic")}  # the call list must be the whole message


def _run(fmt: ToolCallFormat, pieces: list[str]) -> list[RawEvent]:
    return run(pieces, tool_format=fmt, tools=SCHEMA)


@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_one_call_whole_and_streamed(fmt: ToolCallFormat) -> None:
    text = OUTPUTS[fmt] if fmt in TEXT_FIRST else "Let me look.\n" + OUTPUTS[fmt]
    whole, by_char = _run(fmt, [text]), _run(fmt, list(text))
    for events in (whole, by_char):
        message = fold(events)
        assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
        assert json.loads(message["tool_calls"][0]["arguments"]) == {"city": "Paris", "days": 3}
        assert message["content"].strip() == ("" if fmt in TEXT_FIRST else "Let me look.")
    pieces = [e for e in by_char if isinstance(e, ToolCallDelta) and e.arguments]
    assert len(pieces) == 1 if fmt in WHOLE else len(pieces) > 1


@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_no_markup_reaches_the_message(fmt: ToolCallFormat) -> None:
    for events in (_run(fmt, [OUTPUTS[fmt]]), _run(fmt, list(OUTPUTS[fmt]))):
        assert not [e.text for e in events if isinstance(e, TextDelta) and e.text.strip()]


@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_a_cut_off_call_is_a_call_with_broken_arguments(fmt: ToolCallFormat) -> None:
    text = OUTPUTS[fmt]
    cut = text[: text.index("Paris") + 3]
    message = fold(_run(fmt, list(cut)))
    assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
    with pytest.raises(ValueError):
        json.loads(message["tool_calls"][0]["arguments"])


def test_minimax_m3_values_take_the_schema_shape() -> None:
    tools: dict[str, dict[str, object]] = {
        "f": {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {
                    "oneOf": [
                        {"type": "integer"},
                        {"type": "object", "properties": {"max": {"type": "integer"}}},
                    ]
                },
            },
        }
    }
    text = f'{NS}<tool_call>\n{NS}<invoke name="f">{NS}<tags>{NS}<item>a{NS}</item>{NS}<item>b{NS}</item>{NS}</tags>{NS}<limit>{NS}<max>10{NS}</max>{NS}</limit>{NS}</invoke>\n{NS}</tool_call>'
    parser = new_parser(F("minimax_m3"), tools=tools)
    message = fold([*parser.feed(text), *parser.finish()])
    assert json.loads(message["tool_calls"][0]["arguments"]) == {"tags": ["a", "b"], "limit": {"max": 10}}


def test_minimax_m3_a_value_against_its_schema_is_an_invalid_call() -> None:
    text = f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<days>three{NS}</days>{NS}</invoke>'
    message = fold(_run(F("minimax_m3"), [text]))
    assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
    with pytest.raises(ValueError):
        json.loads(message["tool_calls"][0]["arguments"])


def test_minicpm5_cdata_keeps_a_closing_tag_inside_the_value() -> None:
    text = '<function name="get_weather"><param name="city"><![CDATA[a</param>b]]></param></function>'
    for events in (_run(F("minicpm5"), [text]), _run(F("minicpm5"), list(text))):
        assert json.loads(fold(events)["tool_calls"][0]["arguments"]) == {"city": "a</param>b"}


def test_llama4_text_that_is_not_a_call_list_is_the_message() -> None:
    for text in ("[1, 2] are numbers", "Sure: [see(this)]", "[link](http://x)"):
        assert fold(_run(F("llama4_pythonic"), list(text))) == {
            "content": text,
            "reasoning": "",
            "tool_calls": [],
        }


def test_llama4_python_tags_and_several_calls() -> None:
    text = '<|python_start|>[get_weather(city="Paris"), get_weather(city="Rome", days=2)]<|python_end|>'
    calls = fold(_run(F("llama4_pythonic"), list(text)))["tool_calls"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Paris"}, {"city": "Rome", "days": 2}]


def test_llama4_is_recognised_from_its_template() -> None:
    source = "{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}{{- '<|eot|>' }}"
    assert detect_tool_format(source) == F("llama4_pythonic")
    assert family_named(F("llama4_pythonic")).name == "llama4_pythonic"


def test_kimi_k3_reasoning_ends_at_the_response_when_think_never_closes() -> None:
    from sluicegate.parsing.registry import reasoning_setting

    style = reasoning_setting("kimi_k3")
    parser = new_parser(F("kimi_k3"), reasoning=style, starts_in_reasoning=True, tools=SCHEMA)
    text = "hmm<|open|>response<|sep|>Hi.<|close|>response<|sep|><|close|>message<|sep|>"
    assert fold([*parser.feed(text), *parser.finish()]) == {
        "content": "Hi.",
        "reasoning": "hmm",
        "tool_calls": [],
    }


def test_minimax_m3_reads_an_object_written_as_json() -> None:
    tools: dict[str, dict[str, object]] = {
        "f": {
            "type": "object",
            "properties": {"o": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        }
    }
    text = f'{NS}<tool_call>\n{NS}<invoke name="f">{NS}<o>{{"a": 1}}{NS}</o>{NS}</invoke>\n{NS}</tool_call>'
    parser = new_parser(F("minimax_m3"), tools=tools)
    assert json.loads(fold([*parser.feed(text), *parser.finish()])["tool_calls"][0]["arguments"]) == {
        "o": {"a": 1}
    }


def test_muse_glimmer_reasoning_then_the_answer() -> None:
    from sluicegate.parsing.registry import reasoning_setting

    parser = new_parser(F("muse_glimmer"), reasoning=reasoning_setting("muse_glimmer"), tools=SCHEMA)
    text = " to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>Hi there.<|eot|>"
    events = [e for piece in text for e in parser.feed(piece)] + parser.finish()
    assert fold(events) == {"content": "Hi there.", "reasoning": "Think.", "tool_calls": []}


def test_command_r_plus_action_in_prose_is_text() -> None:
    text = "Action: book the flight.\nDone."
    assert fold(_run(F("command_r_plus"), list(text))) == {"content": text, "reasoning": "", "tool_calls": []}


def test_muse_glimmer_a_header_is_only_where_a_message_starts() -> None:
    for text in ("go to=x now", " to=a b\nc"):
        assert fold(_run(F("muse_glimmer"), list(text)))["content"] == text


def test_minimax_m1_a_call_a_line() -> None:
    text = '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_calls>'
    for events in (_run(F("minimax_m1"), [text]), _run(F("minimax_m1"), list(text))):
        message = fold(events)
        assert [json.loads(c["arguments"])["city"] for c in message["tool_calls"]] == ["Paris", "Rome"]
        assert message["content"] == ""


def test_solar_open_reasoning_then_the_answer() -> None:
    from sluicegate.parsing.registry import reasoning_setting

    parser = new_parser(F("solar_open"), reasoning=reasoning_setting("solar_open"), tools=SCHEMA)
    text = "<|think|>Hmm.<|end|><|begin|>assistant<|content|>Hi there.<|end|>"
    events = [e for piece in text for e in parser.feed(piece)] + parser.finish()
    assert fold(events) == {"content": "Hi there.", "reasoning": "Hmm.", "tool_calls": []}


def test_dsml_a_stray_think_close_is_not_text() -> None:
    text = "Sure.</think> Here."
    assert fold(_run(F("deepseek_v3_2"), list(text)))["content"] == "Sure. Here."


def test_firefunction_functools_in_prose_is_text() -> None:
    text = "Python's functools module caches."
    assert fold(_run(F("firefunction_v2"), list(text))) == {
        "content": text,
        "reasoning": "",
        "tool_calls": [],
    }


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (F("gigachat3_1"), "<|function_call|>not json at all, then more"),
        (
            F("minimax_m3"),
            f'{NS}<invoke name="get_weather">{NS}<days>3{NS}</days>]<]min junk{NS}<city>Paris{NS}</city>{NS}</invoke>',
        ),
    ],
)
def test_a_malformed_call_parses_the_same_however_it_is_cut(fmt: ToolCallFormat, text: str) -> None:
    whole = fold(_run(fmt, [text]))
    assert fold(_run(fmt, list(text))) == whole
    assert fold(_run(fmt, [text[:7], text[7:19], text[19:]])) == whole
    assert [c["name"] for c in whole["tool_calls"]] in (["get_weather"], [""])


def test_llama4_json_calls_as_meta_template_renders_them() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    calls = fold(_run(F("llama4_pythonic"), list(text)))["tool_calls"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
