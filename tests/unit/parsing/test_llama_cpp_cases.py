"""The model outputs llama.cpp's tests/test-chat.cpp feeds each format's parser, and the message
it expects (llama_cpp_cases.json, transcribed by transcribe_llama_cpp.py): each fed whole, one
character at a time and in irregular pieces, with the same result every way.

The family is recognised from the template as the engine does, and the output parsed as the
continuation of the prompt the template renders. Cases of families we do not parse yet, or
whose expectation we knowingly differ from, are listed in GAPS with the reason; they must fail
(strict xfail), so the list shrinks as the parsers grow.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from llama_cpp_support import fold, templates_dir
from sluicegate.core.request import Message, ToolSpec
from sluicegate.engines.llamacpp.template import render_chat
from sluicegate.parsing import detect_reasoning, detect_tool_format, new_parser, tool_schemas

CASES: list[dict[str, Any]] = json.loads(Path(__file__).with_name("llama_cpp_cases.json").read_text("utf-8"))[
    "cases"
]

# Templates of families this project does not parse (llama.cpp's newer specialised handlers).
UNSUPPORTED: set[str] = set()
# "template:line" -> why we differ from llama.cpp's expectation.
_RAW_REASONING = "reasoning_format none: llama.cpp hands reasoning markup back in content; we always parse it"
_APRIEL = "llama.cpp keeps the generation prompt's 'Here are my reasoning steps:' in the reasoning"
GAPS: dict[str, str] = {
    "Qwen3.5-4B.jinja:2156": _RAW_REASONING,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja:2704": _RAW_REASONING,
    "google-gemma-4-31B-it.jinja:3011": _RAW_REASONING,
    "openai-gpt-oss-120b.jinja:6442": _RAW_REASONING,
    "Cohere2MoE.jinja:2883": _RAW_REASONING,
    "Apriel-1.6-15b-Thinker-fixed.jinja:6211": _APRIEL,
    "Apriel-1.6-15b-Thinker-fixed.jinja:6219": _APRIEL,
}


def case_id(case: dict[str, Any]) -> str:
    return f"{case['template']}:{case['line']}"


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _normal(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": message["content"].strip(),
        "reasoning": message["reasoning"].strip(),
        "tool_calls": [(c["name"], _arguments(c["arguments"])) for c in message["tool_calls"]],
    }


def _pieces(text: str) -> list[list[str]]:
    sizes = itertools.cycle([1, 3, 2, 7, 5])
    irregular, i = [], 0
    while i < len(text):
        n = next(sizes)
        irregular.append(text[i : i + n])
        i += n
    return [[text], list(text), irregular]


def parse(case: dict[str, Any], source: str, pieces: list[str]) -> dict[str, Any]:
    fmt = detect_tool_format(source)
    reasoning = None if case["reasoning_format"] == "none" else detect_reasoning(source)
    tools = [
        ToolSpec(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in case["tools"]
    ]
    try:
        prompt = render_chat(
            source,
            [Message(role="user", content="Hello")],
            tools,
            bos_token="",
            eos_token="",
            enable_thinking=case["enable_thinking"],
        )
        starts = reasoning is not None and reasoning.opened_by(prompt)
    except Exception:  # a template our renderer cannot run yet: its generation prompt as written
        starts = reasoning is not None and reasoning.starts_open and case["enable_thinking"]
    parser = new_parser(
        fmt, reasoning=reasoning, starts_in_reasoning=starts, tools=tool_schemas(case["tools"])
    )
    events = []
    for piece in pieces:
        events.extend(parser.feed(piece))
    events.extend(parser.finish())
    return fold(events)


def _marks(case: dict[str, Any]) -> list[Any]:
    cid = case_id(case)
    if case["template"] in UNSUPPORTED:
        return [pytest.mark.xfail(reason="family not parsed", strict=False)]
    if cid in GAPS:
        return [pytest.mark.xfail(reason=GAPS[cid], strict=True)]
    return []


@pytest.mark.parametrize("case", [pytest.param(c, id=case_id(c), marks=_marks(c)) for c in CASES])
def test_llama_cpp_case(case: dict[str, Any]) -> None:
    corpus = templates_dir()
    if corpus is None:
        pytest.skip("llama.cpp's template corpus is not available (pip download failed)")
    source = (corpus / case["template"]).read_text(encoding="utf-8")
    expected = _normal(case["expect"])
    results = [_normal(parse(case, source, pieces)) for pieces in _pieces(case["input"])]
    assert results[0] == expected
    assert results[1] == results[0]
    assert results[2] == results[0]
