"""Chat templates render conversations the way Hugging Face does; stop strings never leak."""

from __future__ import annotations

import json

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import Message, ToolCall, ToolSpec
from sluicegate.demo.model import chat_template
from sluicegate.engines.llamacpp.stops import StopScanner
from sluicegate.engines.llamacpp.template import render_chat, template_messages

WEATHER = ToolSpec(
    "get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def render(messages: list[Message], tools: list[ToolSpec] | None = None, **kw: bool) -> str:
    return render_chat(chat_template(), messages, tools or [], bos_token="<s>", eos_token="<|im_end|>", **kw)


def test_plain_conversation_ends_with_the_generation_prompt() -> None:
    prompt = render([Message("developer", "Be brief."), Message("user", "Hi <b>there</b>")])
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <b>there</b><|im_end|>\n<|im_start|>assistant\n"
    )


def test_tools_tool_calls_and_results() -> None:
    messages = [
        Message("system", "You help."),
        Message("user", "Weather in Paris and Rome?"),
        Message(
            "assistant",
            "",
            reasoning="Two cities.",
            tool_calls=[
                ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                ToolCall("call_2", "get_weather", '{"city": "Rome"}'),
            ],
        ),
        Message("tool", "sunny", tool_call_id="call_1"),
        Message("tool", "rainy", tool_call_id="call_2"),
    ]
    prompt = render(messages, [WEATHER])
    assert prompt.startswith("<|im_start|>system\nYou help.\n\n# Tools")
    # tojson without HTML escaping, exactly as HF renders it
    assert (
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parameters": WEATHER.parameters,
                },
            }
        )
        in prompt
    )
    assert "<think>\nTwo cities.\n</think>\n\n" in prompt
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>'
        in prompt
    )
    assert (
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n</tool_response><|im_end|>\n"
        in prompt
    )
    assert prompt.endswith("<|im_start|>assistant\n")


def test_tool_results_carry_the_tool_name_and_arguments_stay_text_when_not_json() -> None:
    messages = template_messages(
        [
            Message("assistant", "", tool_calls=[ToolCall("c1", "f", "not json")]),
            Message("tool", "ok", tool_call_id="c1"),
        ]
    )
    # llama.cpp's shape: content is always a string, "" beside tool calls
    assert (
        messages[0]["content"] == "" and messages[0]["tool_calls"][0]["function"]["arguments"] == "not json"
    )
    assert messages[1] == {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "f"}


def test_thinking_switch() -> None:
    assert render([Message("user", "Hi")], enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert render([Message("user", "Hi")], enable_thinking=True).endswith("<|im_start|>assistant\n")


def test_template_errors_are_bad_requests() -> None:
    with pytest.raises(SluicegateError) as caught:
        render([Message("user", "Hi"), Message("system", "late")])
    assert caught.value.info.status == 400 and "only allowed first" in caught.value.info.message


@pytest.mark.parametrize(
    ("pieces", "emitted", "stopped"),
    [
        (["Hello", " wor", "ld"], "Hello world", False),
        (["Hel", "lo ST", "OP more"], "Hello ", True),
        (["a S", "T", "x"], "a STx", False),  # a false start is released, not lost
        (["abcSTOP"], "abc", True),
    ],
)
def test_stop_scanner(pieces: list[str], emitted: str, stopped: bool) -> None:
    scanner, out, hit = StopScanner(["STOP", "END"]), "", False
    for piece in pieces:
        text, hit = scanner.feed(piece)
        out += text
        assert "STOP"[:2] not in out or not hit
        if hit:
            break
    if not hit:
        out += scanner.flush()
    assert (out, hit) == (emitted, stopped)


def _held_tail_by_length(text: str, stops: list[str]) -> int:
    """The definition: the longest size < len(stop) whose prefix the text ends with."""
    keep = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), keep, -1):
            if text.endswith(stop[:size]):
                keep = size
                break
    return keep


def test_held_tail_is_the_longest_stop_prefix_the_text_ends_with() -> None:
    import random

    from sluicegate.engines.llamacpp.stops import held_tail

    rng = random.Random(48)
    for _ in range(5000):
        stops = ["".join(rng.choices("ab<", k=rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choices("ab<c", k=rng.randint(0, 9)))
        assert held_tail(text, stops) == _held_tail_by_length(text, stops), (text, stops)
    assert held_tail("x <end_of", ["<end_of_turn>", "<eos>"]) == 7
    assert held_tail("x <e", ["<end_of_turn>", "<eos>"]) == 2
    assert held_tail("no marker here", ["<end_of_turn>"]) == 0
