"""The pure checks hostile input meets first: nesting depth (iterative, so a hostile body
cannot overflow the stack), numbers bounded to what engines and the wire carry, integers from
client text that never trust `str.isdigit()`, and llama.cpp's seed mapping."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.json_limits import check_json_depth, json_depth_exceeds
from sluicegate.core.validation import INT32_MAX, INT64_MAX, INT64_MIN, Fields, query_int
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.lmstudio.request import parse_lmstudio_chat
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.engines.llamacpp.engine import llama_seed


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


@pytest.mark.parametrize(
    ("depth", "limit", "exceeds"),
    [(0, 0, False), (1, 1, False), (2, 1, True), (64, 64, False), (65, 64, True)],
)
def test_depth(depth: int, limit: int, exceeds: bool) -> None:
    assert json_depth_exceeds(nested(depth), limit) is exceeds


def test_depth_check_is_iterative() -> None:
    """Far deeper than the interpreter's recursion limit: answered, not a RecursionError."""
    deep = nested(sys.getrecursionlimit() * 5)
    assert json_depth_exceeds(deep, 64)
    with pytest.raises(SluicegateError) as refused:
        check_json_depth(deep, 64)
    assert refused.value.info.status == 400
    assert "max_json_depth" in refused.value.info.message
    check_json_depth(deep, 0)  # 0: no limit


def test_wide_json_is_not_deep() -> None:
    assert not json_depth_exceeds({"a": [[1]] * 10_000, "b": [{}] * 10_000}, 3)


def test_orjson_itself_refuses_what_no_limit_would_let_through() -> None:
    """The body is parsed before the depth check: orjson must refuse (not crash on) bodies far
    deeper than any limit, which the route turns into its usual 400."""
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("20", 20), ("-1", -1), ("100", 100)],
)
def test_query_int_accepts_ascii_digits(text: str, value: int) -> None:
    assert query_int(text, "limit", low=-1, high=100) == value


@pytest.mark.parametrize(
    "text", ["²", "٣", " 5", "5 ", "1_0", "+5", "", "1e3", "0x10", "101", "-2", "9" * 30, "\uff15"]
)
def test_query_int_refuses_everything_else(text: str) -> None:
    with pytest.raises(SluicegateError) as refused:
        query_int(text, "limit", low=-1, high=100)
    assert refused.value.info.param == "limit"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (INT64_MAX, True),
        (INT64_MIN, True),
        (INT64_MAX + 1, False),
        (INT64_MIN - 1, False),
        (2**64, False),
        (float(2**64), False),
        (1e308, False),
        (12.0, True),
    ],
)
def test_integers_default_to_int64(value: Any, ok: bool) -> None:
    f = Fields({"seed": value})
    if ok:
        assert f.integer("seed") == int(value)
    else:
        with pytest.raises(SluicegateError) as refused:
            f.integer("seed")
        assert refused.value.info.param == "seed"
        assert len(refused.value.info.message) < 200  # a huge number is not echoed in full


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e308, -1e308])
def test_numbers_are_finite_and_sane(value: float) -> None:
    with pytest.raises(SluicegateError) as refused:
        Fields({"x": value}).number("x")
    assert refused.value.info.param == "x"


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("max_tokens", INT32_MAX + 1),
        ("max_completion_tokens", 2**64),
        ("top_k", INT32_MAX + 1),
        ("seed", 2**63),
        ("repeat_penalty", 1e308),
        ("temperature", float("nan")),
        ("ttl", 1e300),
        ("n", 10**9),
        ("top_logprobs", 10**9),
    ],
)
def test_chat_completions_bounds(param: str, value: Any) -> None:
    with pytest.raises(SluicegateError) as refused:
        parse_chat_request({**CHAT, param: value, "logprobs": True})
    assert refused.value.info.param == param


def test_chat_completions_limits_themselves_are_accepted() -> None:
    request, _ = parse_chat_request({**CHAT, "max_tokens": INT32_MAX, "seed": INT64_MIN, "top_k": INT32_MAX})
    assert (request.sampling.max_tokens, request.sampling.seed, request.sampling.top_k) == (
        INT32_MAX,
        INT64_MIN,
        INT32_MAX,
    )


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("max_output_tokens", INT32_MAX + 1),
        ("seed", -(2**63) - 1),
        ("max_tool_calls", 2**64),
        ("ttl", float("inf")),
    ],
)
def test_responses_bounds(param: str, value: Any) -> None:
    with pytest.raises(SluicegateError) as refused:
        parse_responses_request({"model": "m", "input": "hi", param: value})
    assert refused.value.info.param == param


@pytest.mark.parametrize(
    ("param", "value"),
    [("max_output_tokens", 2**64), ("top_k", 2**31), ("context_length", 2**40), ("repeat_penalty", 1e308)],
)
def test_lmstudio_bounds(param: str, value: Any) -> None:
    with pytest.raises(SluicegateError) as refused:
        parse_lmstudio_chat({"model": "m", "input": "hi", param: value})
    assert refused.value.info.param == param


@pytest.mark.parametrize("seed", [0, 1, -1, 2**32 - 1, 2**32, INT64_MAX, INT64_MIN])
def test_llama_seed_is_a_fixed_uint32_never_random(seed: int) -> None:
    mapped = llama_seed(seed)
    assert 0 <= mapped < 0xFFFFFFFF  # 0xFFFFFFFF is LLAMA_DEFAULT_SEED: "random"
    assert llama_seed(seed) == mapped
    assert llama_seed(12345) == 12345


def test_tool_arguments_nested_too_deeply_are_refused_not_validated() -> None:
    """jsonschema recurses per level; arguments deep enough to exhaust the stack are refused."""
    from sluicegate.tools.catalog import parse_arguments

    schema = {"type": "object", "properties": {"a": {"type": "object"}}}
    arguments = '{"a":' * 900 + "1" + "}" * 900  # deeper than orjson would write, not than it reads
    assert parse_arguments(arguments, schema) == ({}, "they nest more than 64 levels deep")
    assert parse_arguments(orjson.dumps(nested(61)).decode(), {"type": "object"})[1] is None  # 61 deep


def test_an_absurdly_deep_tool_schema_is_left_to_the_tool() -> None:
    from sluicegate.tools.catalog import parse_arguments

    schema: Any = {"type": "object"}
    for _ in range(2000):
        schema = {"type": "object", "properties": {"a": schema}}
    assert parse_arguments('{"b": 1}', schema) == ({"b": 1}, None)


@pytest.mark.parametrize("depth", [70, 900, 5000])
def test_llama_templates_render_deep_client_json(depth: int) -> None:
    """Tool-call arguments are client text the depth limit never saw: past it they render as
    text; a tool schema just under the limit renders as JSON."""
    from sluicegate.core.request import Message, ToolCall, ToolSpec
    from sluicegate.demo.model import chat_template
    from sluicegate.engines.llamacpp.template import render_chat

    arguments = '{"a":' * depth + "1" + "}" * depth
    messages = [
        Message("user", "hi"),
        Message("assistant", "", tool_calls=[ToolCall("call_1", "f", arguments)]),
        Message("tool", "ok", tool_call_id="call_1"),
    ]
    tool = ToolSpec("f", "", {"type": "object", "x": nested(59)})
    prompt = render_chat(chat_template(), messages, [tool], bos_token="<s>", eos_token="<|im_end|>")
    assert arguments in prompt or '{\\"a\\"' in prompt


def test_huge_values_are_not_echoed_in_full() -> None:
    with pytest.raises(SluicegateError) as refused:
        Fields({"n": 10**5000}).integer("n", low=1, high=128)
    assert "a number of 16610 bits" in refused.value.info.message and len(refused.value.info.message) < 120
