"""parsing: picking the tool-call and reasoning format from real chat-template snippets."""

from __future__ import annotations

import pytest

from sluicegate.parsing import (
    THINK,
    ReasoningStyle,
    ToolCallFormat,
    detect_reasoning,
    detect_tool_format,
    reasoning_setting,
    tool_format_setting,
)

# Trimmed from the templates the models ship (as they appear in the GGUF: `\n` is backslash-n).
QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
        {%- endfor %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

QWEN3 = (
    QWEN25.split("{%- if add_generation_prompt %}")[0]
    + r"""{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
{{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""
)

QWEN3_THINKING = QWEN3.split("{%- if add_generation_prompt %}")[0] + (
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}\n"
)

DEEPSEEK_R1 = r"""{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}
{%- for message in messages %}{%- if message['role'] == 'assistant' and message['content'] is not none %}
{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}
{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}
{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}"""  # noqa: RUF001 (DeepSeek's own tokens)

LLAMA31 = r"""{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if builtin_tools is defined or tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
    {{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n' }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
        {%- else %}
            {{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}{{- "}" }}
        {%- endif %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"""

LLAMA32 = LLAMA31.replace('{{- "<|python_tag|>" + tool_call.name + ".call(" }}', "")

LLAMA3_PLAIN = r"""{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"""

MISTRAL = r"""{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {{- "[INST] " + message["content"] + "[/INST]" }}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}{{- '{"name": "' + tool_call.function.name + '", "arguments": ' + tool_call.function.arguments | tojson + '}' }}{%- endfor %}
        {{- "]" + eos_token }}
    {%- endif %}
{%- endfor %}"""

GEMMA = r"""{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"""


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN25, ToolCallFormat("hermes")),
        (QWEN3, ToolCallFormat("hermes")),
        (QWEN3_THINKING, ToolCallFormat("hermes")),
        (LLAMA31, ToolCallFormat("llama3_json")),
        (LLAMA32, ToolCallFormat("llama3_json")),
        (MISTRAL, ToolCallFormat("mistral")),
        (LLAMA3_PLAIN, ToolCallFormat.NONE),
        (GEMMA, ToolCallFormat.NONE),
        (DEEPSEEK_R1, ToolCallFormat.NONE),
    ],
)
def test_tool_format_from_template(template: str, expected: ToolCallFormat) -> None:
    assert detect_tool_format(template) is expected


def test_architecture_is_only_a_fallback_without_a_template() -> None:
    assert detect_tool_format(None, "qwen2") == ToolCallFormat("hermes")
    assert detect_tool_format("", "Qwen3") == ToolCallFormat("hermes")
    assert detect_tool_format(None, "llama") is ToolCallFormat.NONE  # could be Llama or Mistral
    assert detect_tool_format(GEMMA, "qwen2") is ToolCallFormat.NONE  # the template wins
    assert detect_tool_format(None) is ToolCallFormat.NONE


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN3, ReasoningStyle(starts_open=False)),  # the model writes <think> itself
        (QWEN3_THINKING, ReasoningStyle(starts_open=True)),
        (DEEPSEEK_R1, ReasoningStyle(starts_open=True)),
        (QWEN25, None),
        (LLAMA31, None),
        (MISTRAL, None),
        (None, None),
    ],
)
def test_reasoning_from_template(template: str | None, expected: ReasoningStyle | None) -> None:
    assert detect_reasoning(template) == expected


def test_the_rendered_prompt_says_exactly_whether_reasoning_is_open() -> None:
    assert THINK.opened_by("<|im_start|>assistant\n<think>\n")
    assert not THINK.opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not THINK.opened_by("<|im_start|>assistant\n")


def test_config_values() -> None:
    assert tool_format_setting("Hermes") == ToolCallFormat("hermes")
    assert tool_format_setting("llama3_json") == ToolCallFormat("llama3_json")
    assert tool_format_setting("none") is ToolCallFormat.NONE
    assert reasoning_setting("think") == THINK
    assert reasoning_setting("none") is None
    with pytest.raises(ValueError, match="tool_call_format must be one of"):
        tool_format_setting("xml")
    with pytest.raises(ValueError, match="reasoning must be"):
        reasoning_setting("yes")
