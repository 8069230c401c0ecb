"""parsing: Llama 3 JSON tool calls and Mistral [TOOL_CALLS], in adversarial chunkings."""

from __future__ import annotations

import orjson

from parsing_support import M, R, parse_all_ways
from sluicegate.parsing import THINK, ToolCallFormat

LLAMA = {"tool_format": ToolCallFormat("llama3_json")}
MISTRAL = {"tool_format": ToolCallFormat("mistral")}


def call(index: int, name: str, arguments: object) -> tuple[object, ...]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return ("call", index, f"call_{index}", name, args)


# --- Llama 3 --------------------------------------------------------------------------------


def test_llama_call_with_parameters() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "San Francisco, CA"}}'
    assert parse_all_ways(text, **LLAMA) == [call(0, "get_weather", {"city": "San Francisco, CA"})]


def test_llama_call_after_python_tag_and_whitespace_with_arguments_key() -> None:
    text = '\n <|python_tag|>{"name": "f", "arguments": {"q": "a \\"b\\" {c}"}}'
    assert parse_all_ways(text, **LLAMA) == [call(0, "f", {"q": 'a "b" {c}'})]


def test_llama_several_calls_separated_by_semicolons_or_newlines() -> None:
    text = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}\n{"name": "c", "parameters": {}}'
    assert parse_all_ways(text, **LLAMA) == [call(0, "a", {}), call(1, "b", {"x": 1}), call(2, "c", {})]


def test_llama_wrapped_function_object() -> None:
    text = '{"type": "function", "name": "f", "parameters": {"a": [1]}}'
    assert parse_all_ways(text, **LLAMA) == [call(0, "f", {"a": [1]})]


def test_llama_plain_text_with_braces_later_stays_text() -> None:
    for text in (
        'Sure! Here is JSON: {"name": "x", "parameters": {}}',
        "a < b and {c}",
        "<|python",
        "Hello",
    ):
        assert parse_all_ways(text, **LLAMA) == [(M, text)], text


def test_llama_json_that_is_not_a_call_is_text() -> None:
    text = '{"name": "Ada", "born": 1815} is the answer'
    assert parse_all_ways(text, **LLAMA) == [(M, text)]
    assert parse_all_ways('\n{"a": 1}', **LLAMA) == [(M, '{"a": 1}')]  # leading whitespace goes


def test_llama_text_after_a_call() -> None:
    text = '{"name": "f", "parameters": {}}\nI called it.'
    assert parse_all_ways(text, **LLAMA) == [call(0, "f", {}), (M, "I called it.")]


def test_llama_reasoning_then_call() -> None:
    text = '<think>weather?</think>\n{"name": "f", "parameters": {"a": 1}}'
    assert parse_all_ways(text, **LLAMA, reasoning=THINK) == [(R, "weather?"), call(0, "f", {"a": 1})]


def test_llama_malformed_and_unterminated() -> None:
    # Balanced but not JSON, with a name first: an invalid call, its arguments as streamed.
    text = '{"name": "f", "parameters": {a: 1}}'
    assert parse_all_ways(text, **LLAMA) == [("call", 0, "call_0", "f", "{a:1}")]
    # Cut off: an invalid call with what was written of its arguments.
    text = '{"name": "f", "parameters": {"a": "unfinished'
    assert parse_all_ways(text, **LLAMA) == [("call", 0, "call_0", "f", '{"a":"unfinished')]
    # The arguments before the name: the call leaves whole, raw when it is not JSON.
    text = '{"parameters": {a: 1}, "name": "f"}'
    assert parse_all_ways(text, **LLAMA) == [("call", 0, "call_0", "f", text)]
    text = '{"parameters": {"a": 1}, "name": "f", "x": "unfinished'
    assert parse_all_ways(text, **LLAMA) == [("call", 0, "call_0", "f", text)]
    # Cut off and no name in sight: it was text.
    assert parse_all_ways('{"answer": "unfin', **LLAMA) == [(M, '{"answer": "unfin')]


# --- Mistral --------------------------------------------------------------------------------


def test_mistral_array_of_calls() -> None:
    text = '[TOOL_CALLS] [{"name": "a", "arguments": {"x": "[ARGS]"}}, {"name": "b", "arguments": {}}]'
    assert parse_all_ways(text, **MISTRAL) == [call(0, "a", {"x": "[ARGS]"}), call(1, "b", {})]


def test_mistral_text_before_the_calls() -> None:
    text = 'Let me look.\n[TOOL_CALLS][{"name": "a", "arguments": {"q": "]"}}]'
    assert parse_all_ways(text, **MISTRAL) == [(M, "Let me look."), call(0, "a", {"q": "]"})]


def test_mistral_name_args_form_with_several_calls() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}'
    assert parse_all_ways(text, **MISTRAL) == [
        call(0, "get_weather", {"city": "Paris"}),
        call(1, "get_time", {"tz": "CET"}),
    ]


def test_mistral_name_call_id_args_form() -> None:
    text = '[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{"a": 1}'
    assert parse_all_ways(text, **MISTRAL) == [call(0, "f", {"a": 1})]


def test_mistral_similar_markup_is_text() -> None:
    for text in ("[TOOL_CALL] x", "a [b] c", "[", "list[int]", "[TOOL_CALLS"):
        assert parse_all_ways(text, **MISTRAL) == [(M, text)], text


def test_mistral_malformed_and_unterminated() -> None:
    # Arguments stream as written (compact): broken ones stay broken, under the call's name.
    text = '[TOOL_CALLS][{"name": "f", "arguments": {a}}]'
    assert parse_all_ways(text, **MISTRAL) == [("call", 0, "call_0", "f", "{a}")]
    text = '[TOOL_CALLS]f[ARGS]{"a": tru}'
    assert parse_all_ways(text, **MISTRAL) == [("call", 0, "call_0", "f", '{"a":tru}')]
    text = '[TOOL_CALLS]f[ARGS]{"a": "cut'
    assert parse_all_ways(text, **MISTRAL) == [("call", 0, "call_0", "f", '{"a":"cut')]
    assert parse_all_ways("[TOOL_CALLS]get_wea", **MISTRAL) == [("call", 0, "call_0", "get_wea", "")]
    assert parse_all_ways("ok [TOOL_CALLS]", **MISTRAL) == [(M, "ok"), ("call", 0, "call_0", "", "")]
    assert parse_all_ways('[TOOL_CALLS][{"name": "f", "argu', **MISTRAL) == [
        ("call", 0, "call_0", "f", '{"name": "f", "argu')
    ]
