"""A last assistant message continued, not closed (`continue_final`): the prompt ends inside
it, after its reasoning where there is some, as llama.cpp's `continue_final_message` writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp_support import fold, templates_dir
from sluicegate.core.request import ChatRequest, ContentPart, Message
from sluicegate.demo.model import chat_template
from sluicegate.engines.llamacpp.template import render_request
from sluicegate.parsing import THINK, ReasoningStyle, detect_reasoning

ASK = Message("user", "Name a colour.")


def prompt(source: str, last: Message, *, reasoning: ReasoningStyle | None = None, cont: bool = True) -> str:
    request = ChatRequest(model="m", messages=[ASK, last], continue_final=cont)
    return render_request(source, request, bos_token="<s>", eos_token="</s>", reasoning=reasoning)


def corpus(name: str) -> str:
    folder = templates_dir()
    if folder is None:
        pytest.skip("llama.cpp's template corpus is not available")
    return (Path(folder) / name).read_text(encoding="utf-8")


def test_chatml_ends_inside_the_assistant_message() -> None:
    source = chat_template()
    closed = prompt(source, Message("assistant", "The colour is"), cont=False)
    assert closed.endswith("The colour is<|im_end|>\n<|im_start|>assistant\n")
    continued = prompt(source, Message("assistant", "The colour is"), reasoning=THINK)
    assert continued.endswith(
        "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\nThe colour is"
    )


def test_text_parts_continued_are_joined_by_a_blank_line() -> None:
    # llama.cpp's continuation joins them so (the suite's `Wh` + `ill` prefill is `Wh\n\nill`).
    parts = [ContentPart("text", "Wh"), ContentPart("text", "ill")]
    assert prompt(chat_template(), Message("assistant", parts)).endswith("<|im_start|>assistant\nWh\n\nill")


def test_its_reasoning_comes_first_and_reasoning_alone_stays_open() -> None:
    source = chat_template()
    both = prompt(source, Message("assistant", "Blue", reasoning="Pick one."), reasoning=THINK)
    assert both.endswith("<|im_start|>assistant\n<think>Pick one.</think>Blue")
    alone = prompt(source, Message("assistant", "", reasoning="Pick"), reasoning=THINK)
    assert alone.endswith("<|im_start|>assistant\n<think>Pick")
    assert ChatRequest(
        model="m", messages=[ASK, Message("assistant", "", reasoning="Pick")], continue_final=True
    ).continues_reasoning


def test_a_generation_prompt_that_opens_reasoning_gives_way() -> None:
    # DeepSeek R1's generation prompt opens <think>: continued text closes it first.
    source = corpus("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
    style = detect_reasoning(source)
    assert style is not None
    text = prompt(source, Message("assistant", "Red"), reasoning=style)
    assert text.endswith("<｜Assistant｜><think></think>Red")  # noqa: RUF001
    assert text.count("<think>") == 1


def test_harmony_continues_in_the_final_channel() -> None:
    source = corpus("openai-gpt-oss-120b.jinja")
    style = detect_reasoning(source)
    text = prompt(source, Message("assistant", "Green"), reasoning=style)
    assert text.endswith("<|start|>assistant<|channel|>final<|message|>Green")
    text = prompt(source, Message("assistant", "Green", reasoning="Short."), reasoning=style)
    assert text.endswith(
        "<|start|>assistant<|channel|>analysis<|message|>Short.<|end|><|start|>assistant<|channel|>final<|message|>Green"
    )
    text = prompt(source, Message("assistant", "", reasoning="Hmm"), reasoning=style)
    assert text.endswith("<|start|>assistant<|channel|>analysis<|message|>Hmm")


def test_a_generation_prompt_whose_block_is_closed_stays() -> None:
    source = corpus("Qwen-QwQ-32B.jinja")  # its generation prompt: <think>\n</think>
    text = prompt(source, Message("assistant", "Red"), reasoning=detect_reasoning(source))
    assert text.endswith("<|im_start|>assistant\n<think>\n</think>Red")


def test_an_upstream_is_asked_to_continue_as_vllm_and_llama_server_take_it() -> None:
    from sluicegate.engines.upstream.request_body import request_body

    request = ChatRequest(model="m", messages=[ASK, Message("assistant", "The")], continue_final=True)
    body = request_body(request, "up")
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    request.continue_final = False
    assert "continue_final_message" not in request_body(request, "up")


def test_harmony_reasoning_continued_goes_on_as_reasoning() -> None:
    from sluicegate.parsing import ToolCallFormat, new_parser

    parser = new_parser(ToolCallFormat("harmony"), reasoning=THINK, starts_in_reasoning=True)
    events = [
        *parser.feed(" and more"),
        *parser.feed("<|end|><|start|>assistant<|channel|>final<|message|>Red"),
    ]
    assert fold([*events, *parser.finish()]) == {"content": "Red", "reasoning": " and more", "tool_calls": []}


def test_continued_reasoning_keeps_its_leading_space() -> None:
    from sluicegate.parsing import ToolCallFormat, new_parser

    for continues, expected in ((True, " it over"), (False, "it over")):
        parser = new_parser(
            ToolCallFormat("hermes"), reasoning=THINK, starts_in_reasoning=True, continues=continues
        )
        events = [*parser.feed(" it"), *parser.feed(" over</think>Red"), *parser.finish()]
        assert fold(events) == {"content": "Red", "reasoning": expected, "tool_calls": []}
