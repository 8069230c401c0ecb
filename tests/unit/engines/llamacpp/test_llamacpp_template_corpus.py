"""llama.cpp's own chat-template corpus renders, and renders what llama.cpp's tests say.

The templates and tests come from the llama-cpp-python sdist of the installed version
(`llamacpp_sources`, cached). Without the network they are skipped, except in CI, where not
having them is a failure.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from llamacpp_sources import (
    SourcesUnavailable,
    TemplateCase,
    generation_prompts,
    llama_cpp_tree,
    message_user,
    template_cases,
)
from sluicegate.core.request import Message, ToolCall, ToolSpec
from sluicegate.engines.llamacpp.fallback_templates import BUILTIN
from sluicegate.engines.llamacpp.template import render_chat, render_messages

_UNAVAILABLE = "sources-unavailable"


@functools.cache
def _tree() -> Path | str:
    """The sources, or why they could not be had (asked once per session)."""
    try:
        return llama_cpp_tree()
    except (SourcesUnavailable, OSError) as exc:
        return f"{_UNAVAILABLE}: {exc}"


def _need(tree: Path | str) -> Path:
    if isinstance(tree, Path):
        return tree
    if os.environ.get("CI"):
        pytest.fail(f"llama.cpp's template corpus is needed in CI: {tree}")
    pytest.skip(tree)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per template file / table row, read from the sdist at collection."""
    wanted = {"template_file", "stated", "generation", "builtin"} & set(metafunc.fixturenames)
    if not wanted:
        return
    tree = _tree()
    (name,) = wanted
    if not isinstance(tree, Path):
        metafunc.parametrize(name, [pytest.param(tree, id=_UNAVAILABLE)])
        return
    if name == "template_file":
        files = sorted((tree / "models" / "templates").glob("*.jinja"))
        metafunc.parametrize(name, [pytest.param(f, id=f.name) for f in files])
    elif name == "stated":
        conversation, cases = template_cases(tree)
        rows = [(conversation, c) for c in cases if c.supported_with_jinja]
        metafunc.parametrize(name, [pytest.param(r, id=r[1].name) for r in rows])
    elif name == "generation":
        user = message_user(tree)
        rows = [(tree / "models" / "templates" / f, user, prompt) for f, prompt in generation_prompts(tree)]
        metafunc.parametrize(name, [pytest.param(r, id=r[0].name) for r in rows])
    else:
        conversation, cases = template_cases(tree)
        by_name = {c.name: c for c in cases}
        rows = [(conversation, by_name[case], builtin) for case, builtin in _BUILTIN_CASES.items()]
        metafunc.parametrize(name, [pytest.param(r, id=r[2] + ":" + r[1].name) for r in rows])


# --- every template renders a whole agentic conversation ----------------------------------------

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    ToolSpec("get_weather", "Weather for a city", CITY),
    ToolSpec("get_time", "Local time in a city", CITY),
]
CONVERSATION = [
    Message("system", "You are a terse travel helper."),
    Message("user", "Hi there"),
    Message("assistant", "Hello! Where to?", reasoning="The user greets me."),
    Message("user", "What is the weather in Paris?"),
    Message(
        "assistant",
        "",
        reasoning="I need the weather tool.",
        tool_calls=[ToolCall("call_1", "get_weather", '{"city": "Paris, FR"}')],
    ),
    Message("tool", "sunny and 21C", tool_call_id="call_1"),
    Message("assistant", "Paris is sunny."),
    Message("user", "And Rome, with the local time?"),
    Message(
        "assistant",
        "",
        tool_calls=[
            ToolCall("call_2", "get_weather", '{"city": "Roma, IT"}'),
            ToolCall("call_3", "get_time", '{"city": "Roma, IT"}'),
        ],
    ),
    Message("tool", "rainy and 17C", tool_call_id="call_2"),
    Message("tool", "12:05", tool_call_id="call_3"),
    Message("assistant", "Paris is sunny; Rome is rainy, and it is 12:05 there."),
    Message("user", "Thanks, which should I visit first?"),
]


@pytest.mark.parametrize("thinking", [None, False, True], ids=["default", "thinking-off", "thinking-on"])
def test_every_template_renders_the_whole_conversation(template_file: Any, thinking: bool | None) -> None:
    source = _need(template_file).read_text(encoding="utf-8")
    prompt = render_chat(
        source, CONVERSATION, TOOLS, bos_token="<s>", eos_token="</s>", enable_thinking=thinking
    )
    # What every template can express reaches the model: the system prompt (folded into the
    # first user turn where there is no system role), each turn's text and each tool result.
    for text in (
        "terse travel helper",
        "Hi there",
        "weather in Paris",
        "sunny and 21C",
        "rainy and 17C",
        "12:05",
    ):
        assert text in prompt
    assert "which should I visit first?" in prompt
    # So are the calls (their arguments appear nowhere else).
    assert "Paris, FR" in prompt and "Roma, IT" in prompt


def test_every_template_renders_a_plain_chat(template_file: Any) -> None:
    source = _need(template_file).read_text(encoding="utf-8")
    prompt = render_chat(source, [Message("user", "Hello")], [], bos_token="<s>", eos_token="</s>")
    assert "Hello" in prompt


# --- where llama.cpp's tests state the rendering, ours is identical ---------------------------


def test_rendering_matches_test_chat_template_cpp(stated: Any) -> None:
    """test-chat-template.cpp: each template, its conversation, the Jinja path's expected text
    (llama.cpp renders with enable_thinking = true unless told otherwise)."""
    if isinstance(stated, str):
        _need(stated)
    conversation, case = stated
    messages = [{"role": role, "content": content} for role, content in conversation + case.extra]
    prompt = render_messages(
        case.template,
        messages,
        [],
        bos_token=case.bos_token,
        eos_token=case.eos_token,
        extra={"enable_thinking": True},
    )
    assert prompt == case.expected_jinja


def test_generation_prompt_matches_test_chat_cpp(generation: Any) -> None:
    """test-chat.cpp's test_template_generation_prompt: a system + user conversation ends with the
    stated generation prompt, which is exactly what add_generation_prompt adds."""
    if isinstance(generation, str):
        _need(generation)
    path, user, expected = generation
    source = path.read_text(encoding="utf-8")
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": user},
    ]

    def render(add: bool) -> str:
        return render_messages(
            source,
            messages,
            [],
            bos_token="",
            eos_token="",
            add_generation_prompt=add,
            extra={"enable_thinking": True},
        )

    with_prompt, without = render(True), render(False)
    common = 0
    while common < min(len(with_prompt), len(without)) and with_prompt[common] == without[common]:
        common += 1
    assert with_prompt[common:] == expected and with_prompt.endswith(expected)
    assert "You are a helpful assistant." in with_prompt and user in with_prompt


# --- the fallback templates are llama.cpp's built-in formats -----------------------------------

_BUILTIN_CASES = {
    "teknium/OpenHermes-2.5-Mistral-7B": "chatml",
    "google/gemma-7b-it": "gemma",
    "Llama-3": "llama3",
    "Phi-3-mini": "phi3",
    "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)": "mistral-v7",
    "ibm-granite/granite-3.0-8b-instruct": "granite",
    "ibm-granite/granite-3.x (tool call)": "granite",
}


def test_fallback_templates_render_like_llama_cpp_builtins(builtin: Any) -> None:
    """test-chat-template.cpp's `expected_output` is what llama.cpp's built-in formatter writes."""
    if isinstance(builtin, str):
        _need(builtin)
    conversation, case, name = builtin
    assert isinstance(case, TemplateCase)
    messages = [{"role": role, "content": content} for role, content in conversation + case.extra]
    prompt = render_messages(BUILTIN[name], messages, [], bos_token=case.bos_token, eos_token=case.eos_token)
    assert prompt == case.expected


# --- test-chat.cpp's other statements about rendered prompts -----------------------------------


def _template(name: str) -> str:
    tree = _need(_tree())
    return (tree / "models" / "templates" / name).read_text(encoding="utf-8")


def _call(name: str, arguments: str, call_id: str = "") -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {**call, "id": call_id} if call_id else call


def test_lfm2_5_renders_earlier_reasoning_as_thinking() -> None:
    """test_template_generation_prompt: LFM2.5-8B-A1B reads prior reasoning from `thinking`."""
    messages = [
        {"role": "user", "content": "Hey there!"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I'm\nthinking",
            "tool_calls": [_call("special_function", '{"arg1":1}')],
        },
        {"role": "tool", "content": "Sunny", "name": "special_function", "tool_call_id": "call0"},
    ]
    prompt = render_messages(
        _template("LFM2.5-8B-A1B.jinja"),
        messages,
        [],
        bos_token="",
        eos_token="",
        extra={"enable_thinking": True},
    )
    assert "<think>I'm\nthinking</think>" in prompt


@pytest.mark.parametrize(
    ("order", "ids", "expected"),
    [
        (["weather", "time"], True, "<tool_result>12:00</tool_result>\n\n<tool_result>sunny</tool_result>"),
        (["time", "weather"], True, "<tool_result>12:00</tool_result>\n\n<tool_result>sunny</tool_result>"),
        (["weather", "time"], False, "<tool_result>sunny</tool_result>\n\n<tool_result>12:00</tool_result>"),
    ],
    ids=["reordered", "in-order", "no-ids"],
)
def test_deepseek_v4_tool_results_in_call_order(order: list[str], ids: bool, expected: str) -> None:
    """test_deepseek_v4_tool_result_ordering."""
    calls = [
        _call("get_time", '{"city": "Paris"}', "call_1" if ids else ""),
        _call("get_weather", '{"city": "Paris"}', "call_2" if ids else ""),
    ]
    results = {
        "time": {
            "role": "tool",
            "content": "12:00",
            "name": "get_time",
            **({"tool_call_id": "call_1"} if ids else {}),
        },
        "weather": {
            "role": "tool",
            "content": "sunny",
            "name": "get_weather",
            **({"tool_call_id": "call_2"} if ids else {}),
        },
    }
    messages = [
        {"role": "user", "content": "Question"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *(results[name] for name in order),
    ]
    prompt = render_messages(
        _template("deepseek-ai-DeepSeek-V4.jinja"),
        messages,
        [],
        bos_token="",
        eos_token="",
        add_generation_prompt=False,
        extra={"enable_thinking": True},
    )
    assert expected in prompt


def test_deepseek_v4_drops_earlier_reasoning_only_when_asked() -> None:
    """test_deepseek_v4_thinking_retention (chat_template_kwargs thinking / drop_thinking)."""
    turns = [
        {"role": "user", "content": "Question 1"},
        {"role": "assistant", "content": "Answer 1", "reasoning_content": "thinking A1"},
        {"role": "user", "content": "Question 2"},
        {"role": "assistant", "content": "Answer 2", "reasoning_content": "thinking A2"},
    ]
    marker = "<\uff5cAssistant\uff5c>"

    def render(drop: bool) -> str:
        return render_messages(
            _template("deepseek-ai-DeepSeek-V4.jinja"),
            turns,
            [],
            bos_token="",
            eos_token="",
            add_generation_prompt=False,
            extra={"enable_thinking": True, "thinking": True, "drop_thinking": drop},
        )

    kept, dropped = render(False), render(True)
    assert f"{marker}<think>thinking A1</think>" in kept and f"{marker}<think>thinking A2</think>" in kept
    assert f"{marker}<think>thinking A1</think>" not in dropped
    assert f"{marker}<think>thinking A2</think>" in dropped and f"{marker}</think>Answer 1" in dropped


def test_developer_turns_render_as_system() -> None:
    """test_developer_role_to_system_workaround."""
    template = (
        "{%- for message in messages -%}\n"
        "  {{- '<|' + message.role + '|>' + message.content + '<|end|>' -}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "  {{- '<|assistant|>' -}}\n"
        "{%- endif -%}"
    )
    prompt = render_chat(
        template,
        [Message("developer", "You are a helpful developer assistant.")],
        [],
        bos_token="",
        eos_token="",
    )
    assert "<|developer|>" not in prompt
    assert "<|system|>You are a helpful developer assistant.<|end|>" in prompt
