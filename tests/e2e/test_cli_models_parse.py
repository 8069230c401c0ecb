"""`sluicegate models parse`: a model's raw output on stdin, the message the server would make of
it on stdout (one JSON object, exit 0), with the family recognised from a template file or a
GGUF's own template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e_support import server_env

from llama_cpp_support import templates_dir

pytestmark = pytest.mark.e2e

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]


def parse(folder: Path, stdin: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate", "models", "parse", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        env=server_env(folder),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def corpus() -> Path:
    found = templates_dir()
    if found is None:
        pytest.skip("llama.cpp's template corpus is not available")
    return found


def test_harmony_reasoning_and_a_call(tmp_path: Path, corpus: Path) -> None:
    out = (
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    )
    assert parse(tmp_path, out, "--template", str(corpus / "openai-gpt-oss-120b.jinja")) == {
        "reasoning": "Need the weather.",
        "content": None,
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    }


def test_xml_parameters_typed_by_the_tools(tmp_path: Path, corpus: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    out = (
        "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    template = str(corpus / "Qwen3-Coder.jinja")
    assert parse(tmp_path, out, "--template", template, "--tools", str(tools)) == {
        "reasoning": None,
        "content": "Checking.",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "42", "days": 3}}],
    }


def test_a_gguf_template_and_plain_text(tmp_path: Path) -> None:
    from sluicegate.demo.model import make_demo_gguf

    gguf = make_demo_gguf(tmp_path / "tiny.gguf")
    assert parse(tmp_path, "Just text.", "--gguf", str(gguf)) == {
        "reasoning": None,
        "content": "Just text.",
        "tool_calls": [],
    }
