"""Every family is recognised from its templates in llama.cpp's corpus (not from an architecture
name), GLM's and Qwen3-Coder's are no longer taken for Hermes, and config accepts every family."""

from __future__ import annotations

import pytest

from llama_cpp_support import templates_dir
from sluicegate.parsing import (
    FAMILIES,
    ToolCallFormat,
    detect_reasoning,
    detect_tool_format,
    tool_format_setting,
)
from sluicegate.parsing.registry import reasoning_setting

PAIRS = [(family.name, template) for family in FAMILIES for template in family.templates]


@pytest.mark.parametrize(("family", "template"), PAIRS, ids=[f"{f}:{t}" for f, t in PAIRS])
def test_each_template_is_its_family(family: str, template: str) -> None:
    corpus = templates_dir()
    if corpus is None:
        pytest.skip("llama.cpp's template corpus is not available")
    assert detect_tool_format((corpus / template).read_text(encoding="utf-8")) == family


def test_glm_and_qwen3_coder_are_not_hermes() -> None:
    assert detect_tool_format("{{'<tool_call>' + name}}<arg_key>{{k}}</arg_key>") == ToolCallFormat("glm")
    coder = "<tool_call>\n<function={{name}}>\n<parameter={{k}}>\n{{v}}\n</parameter>"
    assert detect_tool_format(coder) == ToolCallFormat("qwen3_coder")
    assert detect_tool_format("{{'<tool_call>\\n' + tool_call | tojson}}") == ToolCallFormat("hermes")


@pytest.mark.parametrize("fmt", [ToolCallFormat.NONE, *(ToolCallFormat(f.name) for f in FAMILIES)])
def test_config_accepts_every_format(fmt: ToolCallFormat) -> None:
    assert tool_format_setting(fmt.upper()) == fmt


def test_a_family_name_selects_its_reasoning_tags() -> None:
    style = reasoning_setting("seed_oss")
    assert style is not None and (style.open_tag, style.close_tag) == ("<seed:think>", "</seed:think>")
    with pytest.raises(ValueError, match="reasoning must be"):
        reasoning_setting("qwen-ish")


def test_reasoning_tags_follow_the_family() -> None:
    style = detect_reasoning("{{'[SYSTEM_PROMPT]'}}[TOOL_CALLS][THINK]{{x}}[/THINK]")
    assert style is not None and style.open_tag == "[THINK]"
    glm = detect_reasoning("<arg_key>{% if add_generation_prompt %}{{'<|assistant|>\\n<think>'}}{% endif %}")
    assert glm is not None and glm.open_tag == "<think>" and glm.starts_open
