"""The grammars built for structured output and forced tool calls, checked through the grammar
engine itself on the demo GGUF's vocabulary (no model weights needed): what each grammar accepts
and what it refuses, and which grammar (if any) a request gets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llguidance import LLMatcher, LLTokenizer

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ChatRequest, Message, SamplingParams, ToolSpec
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp import runtime as runtime_module
from sluicegate.engines.llamacpp.call_grammar import forced_grammar
from sluicegate.engines.llamacpp.constrained import vocab_tokenizer
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.grammar import (
    BEST_EFFORT_HEADER,
    Grammar,
    SchemaError,
    best_effort_header,
    json_schema_grammar,
    schema_rule,
)
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
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLTokenizer]:
    vocabulary = Vocabulary(make_demo_gguf(tmp_path_factory.mktemp("grammar") / "demo.gguf"))
    yield vocab_tokenizer(vocabulary.model.vocab)  # it tokenizes through the vocabulary: keep it
    vocabulary.close()


def accepts(tokenizer: LLTokenizer, grammar: Grammar, text: str) -> bool:
    """Whether the grammar takes `text` whole, as the demo vocabulary tokenizes it."""
    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


def request(**fields: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=list(TOOLS), **fields)  # type: ignore[arg-type]


def schema_grammar(schema: dict[str, Any], strict: bool = True) -> Grammar:
    return json_schema_grammar(schema, "response_format", strict=strict)


@pytest.mark.parametrize(
    "fmt", [ToolCallFormat("hermes"), ToolCallFormat("llama3_json"), ToolCallFormat("mistral")]
)
def test_forced_calls_in_every_format(tokenizer: LLTokenizer, fmt: ToolCallFormat) -> None:
    key = "parameters" if fmt == "llama3_json" else "arguments"
    call = json.dumps({"name": "lookup", key: {"item": {"id": 3}}})
    wrapped = {
        ToolCallFormat("hermes"): f"<tool_call>\n{call}\n</tool_call>",
        ToolCallFormat("mistral"): f"[TOOL_CALLS][{call}]",
        ToolCallFormat("llama3_json"): call,
    }[fmt]
    for choice in ("required", "lookup"):
        grammar = forced_grammar(request(tool_choice=choice), fmt, "m")
        assert grammar is not None and grammar.purpose == "tool_call"
        assert accepts(tokenizer, grammar, wrapped)
        assert accepts(tokenizer, grammar.after_reasoning(), "\n\n" + wrapped)
        assert not accepts(tokenizer, grammar, wrapped.replace('"id": 3', '"id": "3"'))
    only_lookup = forced_grammar(request(tool_choice="lookup"), fmt, "m")
    assert only_lookup is not None
    weather = wrapped.replace('"lookup"', '"get_weather"').replace('{"item": {"id": 3}}', '{"city": "X"}')
    assert not accepts(tokenizer, only_lookup, weather)
    both = forced_grammar(request(tool_choice="required"), fmt, "m")
    assert both is not None and accepts(tokenizer, both, weather)


def test_response_formats(tokenizer: LLTokenizer) -> None:
    hermes = ToolCallFormat("hermes")
    assert forced_grammar(request(), hermes, "m") is None
    assert forced_grammar(request(response_format={"type": "text"}), hermes, "m") is None
    assert forced_grammar(request(tool_choice="none", response_format={"type": "text"}), hermes, "m") is None
    json_object = forced_grammar(request(response_format={"type": "json_object"}), hermes, "m")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    chat = forced_grammar(
        request(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema, "strict": True},
            }
        ),
        hermes,
        "m",
    )
    responses = forced_grammar(
        request(response_format={"type": "json_schema", "name": "x", "schema": schema}), hermes, "m"
    )
    assert json_object is not None and chat is not None and responses is not None
    assert chat.text == responses.text  # Chat Completions nests the schema, Responses does not
    assert accepts(tokenizer, json_object, '{"b": [1, {}]}') and not accepts(tokenizer, json_object, "[1]")
    assert accepts(tokenizer, chat, '{"a": 1}') and not accepts(tokenizer, chat, '{"b": 1}')
    assert accepts(tokenizer, chat.after_reasoning(), '\n{"a":1}')
    # A forced call wins over response_format.
    forced = forced_grammar(
        request(tool_choice="required", response_format={"type": "json_object"}), hermes, "m"
    )
    assert forced is not None and forced.purpose == "tool_call"


def test_whitespace_between_tokens_is_bounded(tokenizer: LLTokenizer) -> None:
    """A model may indent, but cannot pad forever (a random one otherwise would)."""
    grammar = schema_grammar({"type": "array", "items": {"type": "integer"}})
    assert accepts(tokenizer, grammar, "[1, 2,\n    3]")
    assert not accepts(tokenizer, grammar, "[1,  2]")
    assert not accepts(tokenizer, grammar, "[1,\n" + " " * 21 + "2]")


# (schema, instances it must take, instances it must refuse): each constraint the issue names.
CONSTRAINTS: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    ({"type": "integer", "minimum": 0, "maximum": 150}, [0, 42, 150], [151, -2, -5181011102, 1.5]),
    ({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 25}, [3, 24], [2, 25, 11151111111121]),
    ({"type": "integer", "maximum": 300}, [300, -7], [301, 11101010]),
    ({"type": "number", "minimum": -1.5, "maximum": 2.25}, [-1.5, 0, 2.25, 1e-3], [2.26, -1.6, 10]),
    ({"type": "number", "exclusiveMinimum": 0}, [0.001, 5], [0, -0.5]),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ["ab", "abc", "é€"], ["a", "abcd"]),
    ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,3}$"}, ["AB-12", "XY-999"], ["AB-1", "ab-12"]),
    ({"type": "string", "pattern": "^[\\w.-]+$"}, ["a_b.c-d"], ["a b", ""]),
    ({"type": "string", "format": "date"}, ["2024-02-29"], ["2024-13-01", "24-01-01"]),
    ({"type": "string", "format": "time"}, ["12:34:56Z", "01:02:03+02:00"], ["25:00:00Z", "12:34"]),
    ({"type": "string", "format": "date-time"}, ["2024-01-02T03:04:05Z"], ["2024-01-02 03:04"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567"]),
    ({"type": "string", "format": "email"}, ["a.b@example.com"], ["example.com", "a@"]),
    # A format JSON Schema does not define is an annotation: any string (JSONSchemaBench has
    # `url`, `byte`, `int64`, ...), not a refusal.
    ({"type": "string", "format": "url"}, ["anything at all"], [3]),
    # An integer without bounds is held to what a JSON reader holds exactly: a model cannot pad it.
    ({"type": "integer"}, [0, -(2**53 - 1), 2**53 - 1], [2**53, -(2**53), 10**16]),
    ({"type": "integer", "minimum": 5}, [5, 2**53 - 1], [4, 2**53]),
    ({"type": "integer", "minimum": 10**17}, [10**17, 10**20], [10**17 - 1]),
    ({"enum": ["a\u0000b", "foo\nbar", 3, None]}, ["a\u0000b", "foo\nbar", 3, None], ["ab", "foo", 4]),
    ({"const": {"$ref": "#/x"}}, [{"$ref": "#/x"}], [{"$ref": "#/y"}]),
    ({"type": "array", "maxItems": 2}, [[], [1, "x"]], [[1, 2, 3]]),
    (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        [[1], [1, 2]],
        [[], [1, 2, 3]],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        [[1, "a"], [1]],
        [[1, 2], [1, "a", 3]],
    ),
    (
        {
            "type": "object",
            "properties": {'q"uote': {"type": "integer"}, "back\\slash": {"type": "boolean"}},
            "required": ['q"uote'],
            "additionalProperties": False,
        },
        [{'q"uote': 1}, {'q"uote': 1, "back\\slash": True}],
        [{}, {'q"uote': 1, "other": 2}],
    ),
    (  # closed, as llama.cpp's converter closes it: keys without end are no use to anyone
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        [{"a": 1}, {}],
        [{"a": 1, "b": 2}],
    ),
    (  # ... but not where other subschemas see the same object
        {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "string"}}}]},
        [{"a": 1, "b": "x"}],
        [{"a": "x"}],
    ),
    (
        {"anyOf": [{"const": 1}, {"enum": ["x"]}, {"type": "boolean"}]},
        [1, "x", True],
        [2, "y", None],
    ),
    ({"oneOf": [{"type": "integer", "maximum": -1}, {"type": "string"}]}, [-1, "s"], [0, None]),
    ({"allOf": [{"type": "string"}, {"maxLength": 2}]}, ["ab"], ["abc", 1]),
    (
        {
            "$defs": {
                "node": {"type": "object", "properties": {"kids": {"items": {"$ref": "#/$defs/node"}}}}
            },
            "$ref": "#/$defs/node",
        },
        [{"kids": [{"kids": []}, {}]}],
        [{"kids": [1]}],
    ),
    (
        {"prefixItems": [{"minimum": 5, "type": "integer"}, {"$ref": "#/prefixItems/0"}], "items": False},
        [[5, 6]],
        [[5, 4]],
    ),
    (
        {"$defs": {"a": {"$defs": {"b": {"const": "in"}}}}, "$ref": "#/$defs/a/$defs/b"},
        ["in"],
        ["out"],
    ),
    (
        {"type": "object", "properties": {"$ref": {"type": "integer"}}, "required": ["$ref"]},
        [{"$ref": 1}],
        [{"$ref": "1"}],
    ),
]


@pytest.mark.parametrize(("schema", "valid", "invalid"), CONSTRAINTS, ids=lambda v: json.dumps(v)[:40])
def test_each_constraint_is_enforced(
    tokenizer: LLTokenizer, schema: dict[str, Any], valid: list[Any], invalid: list[Any]
) -> None:
    """Valid values as a model writes them (UTF-8, not `\\u` escapes: the grammar allows one
    spelling of each string); invalid ones in any spelling."""
    grammar = schema_grammar(schema)
    for value in valid:
        assert accepts(tokenizer, grammar, json.dumps(value, ensure_ascii=False)), value
    for value in invalid:
        assert not accepts(tokenizer, grammar, json.dumps(value)), value
        assert not accepts(tokenizer, grammar, json.dumps(value, ensure_ascii=False)), value


def test_what_cannot_be_enforced_is_a_400_naming_the_keyword() -> None:
    with pytest.raises(SluicegateError) as caught:
        forced_grammar(request(tool_choice="required"), ToolCallFormat.NONE, "m")
    assert caught.value.info.param == "tool_choice"
    with pytest.raises(SluicegateError) as caught:
        bad = {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nowhere"}}}
        forced_grammar(request(response_format=bad), ToolCallFormat("hermes"), "m")
    assert caught.value.info.code == "invalid_json_schema"
    for keyword, schema in (
        ("uniqueItems", {"type": "array", "uniqueItems": True}),
        ("propertyNames", {"propertyNames": {"maxLength": 2}}),
        ("format", {"type": "string", "format": "idn-email"}),
        ("oneOf", {"oneOf": [{"type": "integer"}, {"minimum": 2}]}),
    ):
        fmt = {"type": "json_schema", "json_schema": {"schema": schema}}
        with pytest.raises(SluicegateError) as caught:
            forced_grammar(request(response_format=fmt), ToolCallFormat("hermes"), "m")
        assert caught.value.info.code == "unsupported_json_schema_keyword"
        assert keyword in caught.value.info.message
        lenient = request(
            response_format={"type": "json_schema", "json_schema": {"schema": schema, "strict": False}}
        )
        assert forced_grammar(lenient, ToolCallFormat("hermes"), "m") is not None
        assert keyword in lenient.response_headers[BEST_EFFORT_HEADER]
    with pytest.raises(SchemaError) as refused:
        schema_rule({"type": "array", "uniqueItems": True})
    assert refused.value.keywords == ("uniqueItems",)


def test_strict_false_is_best_effort_and_the_header_is_encoded(tokenizer: LLTokenizer) -> None:
    schema = {"type": "array", "items": {"type": "integer", "maximum": 5}, "uniqueItems": True, "a\r\nb": 1}
    fmt = {"type": "json_schema", "json_schema": {"schema": schema, "strict": False}}
    chat = request(response_format=fmt)
    grammar = forced_grammar(chat, ToolCallFormat("hermes"), "m")
    assert grammar is not None and grammar.ignored == ("uniqueItems",)  # an unknown key is no keyword
    assert chat.response_headers[BEST_EFFORT_HEADER] == "best-effort; ignored=uniqueItems"
    crafted = Grammar("", "json_schema", ("a\r\nX-Injected: 1", "pattern"))
    assert best_effort_header(crafted) == "best-effort; ignored=a%0D%0AX-Injected%3A%201,pattern"
    assert accepts(tokenizer, grammar, "[1, 1]") and not accepts(tokenizer, grammar, "[6]")  # the rest holds
    unmarked = request(
        response_format={"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}}
    )
    forced_grammar(unmarked, ToolCallFormat("hermes"), "m")
    assert BEST_EFFORT_HEADER not in unmarked.response_headers


def test_a_tool_pattern_is_enforced_and_one_the_engine_cannot_hold_is_dropped(tokenizer: LLTokenizer) -> None:
    """A custom tool's regex arrives as its `input` pattern: the forced call's grammar holds it.
    A pattern beyond the regex engine (a lookahead) is left to the tool's description rather than
    refusing a well-formed, non-strict tool; a strict tool with it is refused."""

    def forced(pattern: str, strict: bool = False) -> Grammar | None:
        text = {"type": "string", "pattern": pattern}
        tool = ToolSpec("ticket", parameters={"type": "object", "properties": {"input": text}}, strict=strict)
        chat = ChatRequest(model="m", messages=[Message("user", "hi")], tools=[tool], tool_choice="ticket")
        return forced_grammar(chat, ToolCallFormat("hermes"), "m")

    def call(text: str) -> str:
        return (
            "<tool_call>\n" + json.dumps({"name": "ticket", "arguments": {"input": text}}) + "\n</tool_call>"
        )

    enforced = forced("^(T-[0-9]{3})$")
    assert enforced is not None
    assert accepts(tokenizer, enforced, call("T-123")) and not accepts(tokenizer, enforced, call("T-12"))
    dropped = forced("^((?=x)y)$")
    assert dropped is not None and accepts(tokenizer, dropped, call("anything"))
    with pytest.raises(SluicegateError):
        forced("^((?=x)y)$", strict=True)


def test_properties_named_like_keywords_are_schemas(tokenizer: LLTokenizer) -> None:
    """`enum`, `const`, `pattern`, `$ref` as property names: their values are schemas, walked."""
    schema = {
        "type": "object",
        "properties": {
            "enum": {"type": "string", "pattern": "^(?=a)a$"},  # a lookahead: dropped, best effort
            "$ref": {"$ref": "#/$defs/n"},
        },
        "$defs": {"n": {"type": "integer", "maximum": 3}},
        "required": ["enum", "$ref"],
    }
    grammar = schema_grammar(schema, strict=False)
    assert grammar.ignored == ("pattern",)
    assert accepts(tokenizer, grammar, '{"enum": "x", "$ref": 3}')
    assert not accepts(tokenizer, grammar, '{"enum": "x", "$ref": 4}')
    tool = ToolSpec("t", parameters=schema)
    chat = ChatRequest(model="m", messages=[Message("user", "hi")], tools=[tool], tool_choice="t")
    forced = forced_grammar(chat, ToolCallFormat("llama3_json"), "m")
    assert forced is not None
    assert accepts(tokenizer, forced, '{"name": "t", "parameters": {"enum": "x", "$ref": 3}}')
    assert not accepts(tokenizer, forced, '{"name": "t", "parameters": {"enum": "x", "$ref": 4}}')


def allows(matcher: LLMatcher, tokenizer: LLTokenizer, token: int) -> bool:
    """Whether `token` is in the matcher's mask for the next step."""
    mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    return bool(mask[token // 32] >> (token % 32) & 1)


def test_markup_tokens_match_as_text_and_end_of_turn_only_ends(tmp_path: Any) -> None:
    """The model's own `<tool_call>` token (one token, a special one) satisfies the literal in a
    forced call's grammar, as in llama.cpp's grammar sampler; end-of-turn is allowed only where
    the grammar is complete."""
    vocabulary = Vocabulary(make_demo_gguf(tmp_path / "demo.gguf"))
    try:
        vocab = vocabulary.model.vocab
        tokenizer = vocab_tokenizer(vocab)
        (open_tag,) = vocabulary.model.tokenize(b"<tool_call>", add_bos=False, special=True)
        (end,) = vocabulary.model.tokenize(b"<|im_end|>", add_bos=False, special=True)
        grammar = forced_grammar(request(tool_choice="lookup"), ToolCallFormat("hermes"), "m")
        assert grammar is not None
        matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
        assert matcher.validate_tokens([open_tag]) == 1 and not allows(matcher, tokenizer, end)  # no end yet
        assert matcher.consume_token(open_tag)
        body = tokenizer.tokenize_str('\n{"name": "lookup", "arguments": {}}\n</tool_call>')
        assert matcher.consume_tokens(body) and allows(matcher, tokenizer, end)
        assert matcher.consume_token(end) and matcher.is_stopped()
    finally:
        vocabulary.close()


async def test_the_vocabulary_view_is_built_by_the_first_structured_request_off_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded chat model holds no grammar view (~95 MiB for a 262k vocabulary) until a
    structured request needs it; that request builds it on a thread that is neither the event
    loop's nor the worker's (where every sequence would wait), and the next one reuses it."""
    threads: list[str] = []

    def counted(vocab: Any) -> LLTokenizer:
        threads.append(threading.current_thread().name)
        return vocab_tokenizer(vocab)

    monkeypatch.setattr(runtime_module, "vocab_tokenizer", counted)
    gguf = make_demo_gguf(tmp_path / "demo.gguf")
    engine = LlamaCppEngine.from_config(
        {"id": "m", "path": str(gguf), "context_length": 256, "batching": True, "parallel": 2}, Path(".")
    )
    await engine.load(lambda _p: None)
    try:
        runtime = engine._runtime
        assert runtime is not None
        plain = ChatRequest(
            model="m", messages=[Message("user", "hi")], sampling=SamplingParams(max_tokens=4)
        )
        engine.check(plain)
        [_ async for _ in engine.generate(plain)]
        assert threads == [] and not runtime.guidance_ready  # not at load, nor for plain output

        structured = ChatRequest(
            model="m",
            messages=[Message("user", "hi")],
            sampling=SamplingParams(max_tokens=4),
            response_format={"type": "json_object"},
        )
        for _ in range(2):
            engine.check(structured)
            [_ async for _ in engine.generate(structured)]
        assert len(threads) == 1  # built once
        assert threads[0] != threading.current_thread().name
        assert not threads[0].startswith("llamacpp-")  # the worker is llamacpp-<model>_0
    finally:
        await engine.unload()
