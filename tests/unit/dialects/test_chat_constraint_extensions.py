"""Chat Completions' llama-server extensions that constrain the answer: a top-level
`json_schema`, a `schema` inside `json_object`, a GBNF `grammar`. Each is the same
`response_format` the engine builds its grammar from; two at once are a 400."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.engines.llamacpp.grammar import request_grammar


def body(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Write an example"}], **extra}


def test_top_level_json_schema_constrains_the_answer() -> None:
    request, _ = parse_chat_request(body(json_schema={"const": "42"}))
    assert request.response_format is not None
    assert request.response_format["json_schema"]["schema"] == {"const": "42"}
    grammar = request_grammar(request)
    assert grammar is not None and grammar.purpose == "json_schema"
    assert '"42"' in grammar.text


def test_schema_inside_json_object_is_a_json_schema() -> None:
    request, _ = parse_chat_request(body(response_format={"type": "json_object", "schema": {"const": "42"}}))
    grammar = request_grammar(request)
    assert grammar is not None and grammar.purpose == "json_schema"
    assert '"42"' in grammar.text


def test_json_object_without_schema_stays_any_object() -> None:
    request, _ = parse_chat_request(body(response_format={"type": "json_object"}))
    assert request.response_format == {"type": "json_object"}


@pytest.mark.parametrize("schema", [123, {"type": 123}, {"type": "hiccup"}])
def test_a_bad_schema_inside_json_object_is_a_400(schema: Any) -> None:
    request, _ = parse_chat_request(body(response_format={"type": "json_object", "schema": schema}))
    with pytest.raises(SluicegateError) as caught:
        request_grammar(request)
    assert caught.value.info.kind is ErrorKind.INVALID_REQUEST


@pytest.mark.parametrize(
    "extra",
    [
        {"json_schema": {"const": "42"}, "grammar": 'root ::= "a"'},
        {"json_schema": {"const": "42"}, "response_format": {"type": "json_object"}},
        {"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}},
    ],
)
def test_two_constraints_at_once_are_a_400(extra: dict[str, Any]) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_chat_request(body(**extra))
    assert caught.value.info.kind is ErrorKind.INVALID_REQUEST
    assert "not" in caught.value.info.message


def test_json_schema_null_is_absent() -> None:
    request, _ = parse_chat_request(body(json_schema=None))
    assert request.response_format is None
