"""`sluicegate models render`: the prompt text a conversation on stdin becomes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sluicegate.cli.main import main
from sluicegate.demo.model import chat_template, make_demo_gguf
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.engines.llamacpp import LlamaCppEngine

CONVERSATION: dict[str, Any] = {
    "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {}}}},
        }
    ],
}


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["models", "render", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_template_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "chat.jinja"
    template.write_text(chat_template(), encoding="utf-8")
    code, out, _ = run(monkeypatch, capsys, json.dumps(CONVERSATION), "--template", str(template))
    assert code == 0
    assert out.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in out
    assert out.endswith("<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_gguf_prints_exactly_what_the_engine_decodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = make_demo_gguf(tmp_path / "tiny.gguf")
    code, out, _ = run(monkeypatch, capsys, json.dumps(CONVERSATION), "--gguf", str(gguf))
    engine = LlamaCppEngine.from_config({"id": "m", "engine": "llamacpp", "path": str(gguf)}, tmp_path)
    request, _ = parse_chat_request({"model": "m", **CONVERSATION})
    assert code == 0 and out == engine.render_prompt(request)
    assert "Weather in Paris?" in out and out.endswith("<|im_start|>assistant\n")


def test_a_gguf_without_a_template_renders_its_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = make_demo_gguf(tmp_path / "embed.gguf", embedding=True)  # the demo writes no template for it
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    code, out, _ = run(monkeypatch, capsys, json.dumps(body), "--gguf", str(gguf))
    assert code == 0 and out == "Question: What is the capital of France?\nAnswer:"


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("not json", "Expecting value"),
        ("[1]", "JSON object"),
        ('{"messages": 3}', "'messages'"),
    ],
)
def test_bad_input_is_one_line_and_status_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stdin: str,
    message: str,
) -> None:
    template = tmp_path / "chat.jinja"
    template.write_text(chat_template(), encoding="utf-8")
    code, out, err = run(monkeypatch, capsys, stdin, "--template", str(template))
    assert code == 1 and out == "" and message in err


def test_a_template_that_refuses_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "strict.jinja"
    template.write_text("{{ raise_exception('Only user turns, please') }}", encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, json.dumps(CONVERSATION), "--template", str(template))
    assert code == 1 and "Only user turns, please" in err


def test_needs_a_template_or_a_gguf(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(monkeypatch, capsys, "{}")
    assert code == 2 and "--template FILE or --gguf FILE" in err


def test_a_continued_message_ends_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "chat.jinja"
    template.write_text(chat_template(), encoding="utf-8")
    body = {
        "messages": [
            {"role": "user", "content": "Colour?"},
            {"role": "assistant", "content": "Blue", "reasoning_content": "Pick one."},
        ],
        "continue_final_message": True,
    }
    code, out, _ = run(monkeypatch, capsys, json.dumps(body), "--template", str(template))
    assert code == 0
    assert out.endswith("<|im_start|>assistant\n<think>Pick one.</think>Blue")
