"""The Jinja environment behaves as llama.cpp's `common/jinja` engine, where real templates
depend on it (value.cpp, runtime.cpp)."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import Message
from sluicegate.engines.llamacpp.jinja_env import compile_template, tojson
from sluicegate.engines.llamacpp.template import render_chat


def render(source: str, **variables: Any) -> str:
    return compile_template(source).render(**variables)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # separators ", " and ": ", non-ASCII and markup kept as they are, key order kept
        ('{{ {"b": [1, 2], "a": "é<x>"} | tojson }}', '{"b": [1, 2], "a": "é<x>"}'),
        # with an indent, items end in "," (Python's json.dumps does the same)
        (
            '{{ {"a": [1, {}], "b": []} | tojson(indent=2) }}',
            '{\n  "a": [\n    1,\n    {}\n  ],\n  "b": []\n}',
        ),
        ("{{ [1, 2] | tojson(indent=0) }}", "[\n1,\n2\n]"),
        ('{{ "é" | tojson(ensure_ascii=true) }}', '"\\u00e9"'),
        ('{{ {"a": 1, "b": 2} | tojson(separators=(",", ":")) }}', '{"a":1,"b":2}'),
        # floats as a C++ stream writes them: six significant digits
        ("{{ 3.14159265 | tojson }}", "3.14159"),
        ("{{ [none, true, false] | tojson }}", "[null, true, false]"),
        ("{{ missing | tojson }}", "null"),
        ("{{ tools | map(attribute='name') | tojson }}", '["a", "b"]'),  # a generator is an array
        ('{{ "tab\\there\\n" | tojson }}', '"tab\\there\\n"'),
    ],
)
def test_tojson(source: str, expected: str) -> None:
    assert render(source, tools=[{"name": "a"}, {"name": "b"}]) == expected


def test_tojson_keeps_control_characters_escaped() -> None:
    assert tojson("\x01") == '"\\u0001"'


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # none and undefined are "" beside a string, for + and ~ alike
        ("{{ message.content + '!' }}", "!"),
        ("{{ 'x' ~ message.content ~ missing }}", "x"),
        ("{{ '<' + missing + '>' }}", "<>"),
        ("{{ 'n=' + 3 }}", "n=3"),
        # undefined chains, iterates as nothing, and is false
        ("{{ message.tool_calls.first.name }}|{% for c in message.tool_calls %}x{% endfor %}|", "||"),
        ("{% if message.tool_calls.first %}yes{% else %}no{% endif %}", "no"),
        # values print as Python (and llama.cpp) print them
        ("{{ true }} {{ none }} {{ 1.50 }} {{ [1, 'a'] }}", "True None 1.5 [1, 'a']"),
        # lists grow in place, as templates build them
        ("{% set items = [] %}{% set _ = items.append(1) %}{{ items | length }}", "1"),
        # python-style methods templates call
        ("{{ 'a,b'.split(',') | join('-') }} {{ ' x '.strip() }} {{ 'abc'.startswith('a') }}", "a-b x True"),
        ("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %} {{ {'a': 1}.get('b', 2) }}", "a=1 2"),
        # loop controls and HF's {% generation %} marker
        ("{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}", "01"),
        ("{% generation %}kept{% endgeneration %}", "kept"),
    ],
)
def test_leniencies_and_builtins(source: str, expected: str) -> None:
    assert render(source, message={"role": "assistant", "content": None}) == expected


def test_strftime_now() -> None:
    assert render("{{ strftime_now('%Y') }}").isdigit()


def test_raise_exception_is_a_400_naming_the_problem() -> None:
    template = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user turn') }}{% endif %}"
    with pytest.raises(SluicegateError) as refused:
        render_chat(template, [Message("assistant", "Hi")], [], bos_token="", eos_token="")
    assert refused.value.info.status == 400
    assert "Conversations must start with a user turn" in refused.value.info.message


def test_a_template_that_breaks_is_a_400_not_a_500() -> None:
    with pytest.raises(SluicegateError) as refused:
        render_chat("{{ messages[0].content / 2 }}", [Message("user", "Hi")], [], bos_token="", eos_token="")
    assert (
        refused.value.info.status == 400 and "cannot render this conversation" in refused.value.info.message
    )
