"""The grammars built for structured output and forced tool calls: every format compiles in
llama.cpp, and the request decides which grammar (if any) applies."""

from __future__ import annotations

import llama_cpp
import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ChatRequest, Message, ToolSpec
from sluicegate.engines.llamacpp.demo import make_demo_gguf
from sluicegate.engines.llamacpp.grammar import Grammar, request_grammar
from sluicegate.engines.llamacpp.runtime import Vocabulary
from sluicegate.parsing import ToolCallFormat

TOOLS = [
    ToolSpec(
        "get_weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    ToolSpec(
        "lookup",
        parameters={
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "integer"}}}},
        },
    ),
]


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory: pytest.TempPathFactory) -> Vocabulary:
    return Vocabulary(make_demo_gguf(tmp_path_factory.mktemp("grammar") / "demo.gguf"))


def compiles(vocabulary: Vocabulary, grammar: Grammar) -> bool:
    sampler = llama_cpp.llama_sampler_init_grammar(vocabulary.model.vocab, grammar.text.encode(), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def request(**fields: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=list(TOOLS), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", [ToolCallFormat.HERMES, ToolCallFormat.LLAMA3_JSON, ToolCallFormat.MISTRAL])
def test_forced_calls_compile_in_every_format(vocabulary: Vocabulary, fmt: ToolCallFormat) -> None:
    for choice in ("required", "lookup"):
        grammar = request_grammar(request(tool_choice=choice), fmt, "m")
        assert grammar is not None and grammar.purpose == "tool_call"
        assert compiles(vocabulary, grammar) and compiles(vocabulary, grammar.after_reasoning())
    only_lookup = request_grammar(request(tool_choice="lookup"), fmt, "m")
    assert only_lookup is not None and '\\"get_weather\\"' not in only_lookup.text
    key = "parameters" if fmt is ToolCallFormat.LLAMA3_JSON else "arguments"
    assert f'\\"{key}\\"' in only_lookup.text


def test_response_formats(vocabulary: Vocabulary) -> None:
    hermes = ToolCallFormat.HERMES
    assert request_grammar(request(), hermes, "m") is None
    assert request_grammar(request(response_format={"type": "text"}), hermes, "m") is None
    assert request_grammar(request(tool_choice="none", response_format={"type": "text"}), hermes, "m") is None
    json_object = request_grammar(request(response_format={"type": "json_object"}), hermes, "m")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    chat = request_grammar(
        request(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema, "strict": True},
            }
        ),
        hermes,
        "m",
    )
    responses = request_grammar(
        request(response_format={"type": "json_schema", "name": "x", "schema": schema}), hermes, "m"
    )
    assert json_object is not None and chat is not None and responses is not None
    assert chat.text == responses.text  # Chat Completions nests the schema, Responses does not
    for grammar in (json_object, chat):
        assert compiles(vocabulary, grammar) and compiles(vocabulary, grammar.after_reasoning())
    # A forced call wins over response_format.
    forced = request_grammar(
        request(tool_choice="required", response_format={"type": "json_object"}), hermes, "m"
    )
    assert forced is not None and forced.purpose == "tool_call"


def test_what_cannot_be_enforced_is_a_400() -> None:
    with pytest.raises(SluicegateError) as caught:
        request_grammar(request(tool_choice="required"), ToolCallFormat.NONE, "m")
    assert caught.value.info.param == "tool_choice"
    with pytest.raises(SluicegateError) as caught:
        bad = {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nowhere"}}}
        request_grammar(request(response_format=bad), ToolCallFormat.HERMES, "m")
    assert caught.value.info.code == "invalid_json_schema"


def test_a_string_pattern_is_enforced_and_one_the_converter_cannot_hold_is_dropped(
    vocabulary: Vocabulary,
) -> None:
    """A custom tool's regex arrives as its `input` pattern: the forced call's grammar holds it.
    A pattern beyond the converter's regex subset is left to the tool's description rather than
    refusing a well-formed tool."""

    def tool(pattern: str) -> ToolSpec:
        text = {"type": "string", "pattern": pattern}
        return ToolSpec("ticket", parameters={"type": "object", "properties": {"input": text}})

    enforced = request_grammar(
        ChatRequest(
            model="m", messages=[Message("user", "hi")], tools=[tool("^(T-[0-9]{3})$")], tool_choice="ticket"
        ),
        ToolCallFormat.HERMES,
        "m",
    )
    assert enforced is not None and compiles(vocabulary, enforced)
    assert '"T" "-"' in enforced.text and "[0-9]" in enforced.text
    dropped = request_grammar(
        ChatRequest(
            model="m", messages=[Message("user", "hi")], tools=[tool("^((?=x)y)$")], tool_choice="ticket"
        ),
        ToolCallFormat.HERMES,
        "m",
    )
    assert dropped is not None and compiles(vocabulary, dropped)
    assert "(?=" not in dropped.text
