"""OpenAI's `stream` and `stream_options`, read once (`core/validation.py` `stream_fields`) by
the three OpenAI dialects: the same refusals, the same `include_usage`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.completions.request import parse_completion_request
from sluicegate.dialects.responses.request import parse_responses_request

BODIES: dict[str, tuple[dict[str, Any], Callable[[Any], Any]]] = {
    "chat": ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, parse_chat_request),
    "completions": ({"model": "m", "prompt": "hi"}, parse_completion_request),
    "responses": ({"model": "m", "input": "hi"}, parse_responses_request),
}


@pytest.mark.parametrize("dialect", list(BODIES))
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream_options": {"include_usage": True}}, "stream_options"),  # without `stream`
        ({"stream": True, "stream_options": []}, "stream_options"),
        (
            {"stream": True, "stream_options": {"include_obfuscation": "no"}},
            "stream_options.include_obfuscation",
        ),
    ],
)
def test_each_openai_dialect_refuses_alike(dialect: str, fields: dict[str, Any], param: str) -> None:
    body, parse = BODIES[dialect]
    with pytest.raises(SluicegateError) as caught:
        parse({**body, **fields})
    assert caught.value.info.param == param


@pytest.mark.parametrize("dialect", ["chat", "completions"])
def test_include_usage(dialect: str) -> None:
    body, parse = BODIES[dialect]
    _, options = parse({**body, "stream": True, "stream_options": {"include_usage": True}})
    assert options.stream and options.include_usage
    _, options = parse({**body, "stream": True, "stream_options": {"include_obfuscation": False}})
    assert options.stream and not options.include_usage
