"""Arguments leave while the model writes them; what leaves concatenates to valid JSON; a
cut-off call is still a call (with arguments that are not JSON: the dialects' invalid call);
no family's special tokens reach the message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llama_cpp_support import fold
from parsing_support import run
from sluicegate.core.events import RawEvent, TextDelta, ToolCallDelta
from sluicegate.parsing import THINK, ToolCallFormat, new_parser

SCHEMA = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
}

# family -> (output with one call of get_weather {"city": "Paris", "days": 3}, text before the arguments end)
OUTPUTS: dict[ToolCallFormat, str] = {
    ToolCallFormat("mistral"): '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
    ToolCallFormat(
        "hermes"
    ): '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
    ToolCallFormat(
        "harmony"
    ): '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>',
    ToolCallFormat(
        "qwen3_coder"
    ): "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    ToolCallFormat(
        "seed_oss"
    ): "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
    ToolCallFormat(
        "glm"
    ): "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
    ToolCallFormat(
        "minimax_m2"
    ): '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>',
    ToolCallFormat(
        "deepseek_v3_1"
    ): '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',  # noqa: RUF001
    ToolCallFormat(
        "deepseek_r1"
    ): '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',  # noqa: RUF001
    ToolCallFormat(
        "kimi_k2"
    ): '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>',
    ToolCallFormat("gemma4"): '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>',
    ToolCallFormat("lfm2"): '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
    ToolCallFormat(
        "nemotron"
    ): '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]</TOOLCALL>',
    ToolCallFormat(
        "granite"
    ): '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    ToolCallFormat(
        "command_r7b"
    ): '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}}]<|END_ACTION|>',
    ToolCallFormat(
        "apertus"
    ): '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 3}}]<|tools_suffix|>',
    ToolCallFormat("functionary_v3_1"): '<function=get_weather>{"city": "Paris", "days": 3}</function>',
    ToolCallFormat("functionary_v3_2"): 'get_weather\n{"city": "Paris", "days": 3}',
    ToolCallFormat(
        "llama3_json"
    ): '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
}
AT_START = {
    ToolCallFormat("functionary_v3_2"),
    ToolCallFormat("llama3_json"),
}  # a call only opens the message
WHOLE: set[ToolCallFormat] = set()  # formats whose call leaves whole when it closes


def _run(fmt: ToolCallFormat, pieces: list[str]) -> list[RawEvent]:
    return run(pieces, tool_format=fmt, tools=SCHEMA)


@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_one_call_whole_and_streamed(fmt: ToolCallFormat) -> None:
    text = OUTPUTS[fmt] if fmt in AT_START else "Let me look.\n" + OUTPUTS[fmt]
    whole, by_char = _run(fmt, [text]), _run(fmt, list(text))
    for events in (whole, by_char):
        message = fold(events)
        assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
        assert json.loads(message["tool_calls"][0]["arguments"]) == {"city": "Paris", "days": 3}
    pieces = [e for e in by_char if isinstance(e, ToolCallDelta) and e.arguments]
    assert len(pieces) == 1 if fmt in WHOLE else len(pieces) > 1


@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_no_markup_reaches_the_message(fmt: ToolCallFormat) -> None:
    for events in (_run(fmt, [OUTPUTS[fmt]]), _run(fmt, list(OUTPUTS[fmt]))):
        assert not [e.text for e in events if isinstance(e, TextDelta)]


@pytest.mark.parametrize("fmt", [f for f in OUTPUTS if f not in WHOLE])
def test_a_cut_off_call_is_a_call_with_broken_arguments(fmt: ToolCallFormat) -> None:
    text = OUTPUTS[fmt]
    cut = text[: text.index("Paris") + 3]
    message = fold(_run(fmt, list(cut)))
    assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
    arguments: Any = message["tool_calls"][0]["arguments"]
    with pytest.raises(ValueError):
        json.loads(arguments)


def test_reasoning_that_never_closes_stays_reasoning() -> None:
    parser = new_parser(ToolCallFormat("glm"), reasoning=THINK, tools=SCHEMA)
    events = parser.feed("<think>still ") + parser.feed("thinking <tool_call") + parser.finish()
    assert fold(events) == {"content": "", "reasoning": "still thinking <tool_call", "tool_calls": []}


def test_harmony_builtin_recipients_are_dropped() -> None:
    text = "<|channel|>analysis<|message|>run it<|end|><|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print(1)<|call|>"
    assert fold(_run(ToolCallFormat("harmony"), list(text))) == {
        "content": "",
        "reasoning": "run it",
        "tool_calls": [],
    }


def _gemma(body: str) -> tuple[str, list[tuple[str, str]] | None]:
    from sluicegate.parsing.families.gemma import gemma_json

    whole = gemma_json(body)
    return f"<|tool_call>call:f{body}<tool_call|>", None if whole is None else [("f", whole)]


def _lfm2(body: str) -> tuple[str, list[tuple[str, str]] | None]:
    from sluicegate.parsing.families.lfm2 import python_calls

    return f"<|tool_call_start|>{body}<|tool_call_end|>", python_calls(body)


# Converted syntaxes: (format, call body); the whole conversion (what the family read before
# its arguments streamed) is the reference.
CONVERTED = [
    (ToolCallFormat("gemma4"), '{city:<|"|>Paris, "FR" {x}: a<b <tool_call<|"|>,days:3}'),
    (ToolCallFormat("gemma4"), "{q:hello world,n:-1.5e3,ok:true,none:null,list:[1,two,[3]],o:{k:{j:v}}}"),
    (ToolCallFormat("gemma4"), '{s:"a \\"json\\" string",t:<|"|><|"|>, e:[]}'),
    (ToolCallFormat("gemma4"), "{}"),
    (ToolCallFormat("lfm2"), "[get_weather(city='Paris, \"FR\" (x)', days=3)]"),
    (
        ToolCallFormat("lfm2"),
        '[f(s="tab\\there \\u00e9 \\x41 \\101 \\\\ \\\' q", n=-1.5e3, ok=True, no=None, t=(1, 2), l=[1, [2]], d={"k": {"j": False}})]',
    ),
    (ToolCallFormat("lfm2"), "[a(), b(x=1)]"),
    (ToolCallFormat("lfm2"), "f(q='<|tool_call_end not yet|>')"),
]


@pytest.mark.parametrize(("fmt", "body"), CONVERTED)
def test_converted_arguments_stream_as_the_whole_conversion(fmt: ToolCallFormat, body: str) -> None:
    call, expected = (_gemma if fmt == ToolCallFormat("gemma4") else _lfm2)(body)
    assert expected is not None
    text = call + "after"
    for pieces in ([text], list(text), [text[i : i + 3] for i in range(0, len(text), 3)]):
        message = fold(_run(fmt, pieces))
        assert [(c["name"], c["arguments"]) for c in message["tool_calls"]] == expected
        assert message["content"] == "after"
    streamed = [e for e in _run(fmt, list(text)) if isinstance(e, ToolCallDelta)]
    assert len(streamed) > 2 * len(expected) or body == "{}"


def test_gemma4_call_cut_off_or_without_arguments_is_invalid() -> None:
    for text in ("<|tool_call>call:f<tool_call|>", '<|tool_call>call:f{a:<|"|>unfinished'):
        (call,) = fold(_run(ToolCallFormat("gemma4"), list(text)))["tool_calls"]
        assert call["name"] == "f"
        with pytest.raises(ValueError):
            json.loads(call["arguments"])


def test_lfm2_positional_or_cut_off_arguments_are_invalid() -> None:
    for text in ("<|tool_call_start|>[f(1)]<|tool_call_end|>", "<|tool_call_start|>[f(a='unfinished"):
        (call,) = fold(_run(ToolCallFormat("lfm2"), list(text)))["tool_calls"]
        assert call["name"] == "f"
        with pytest.raises(ValueError):
            json.loads(call["arguments"])
