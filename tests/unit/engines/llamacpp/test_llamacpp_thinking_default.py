"""The thinking switch of a request that sets no reasoning effort (`thinking`, llama-server's
`--reasoning on|off|auto`), and llama.cpp's built-in template names as `chat_template`."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.core.request import ChatRequest, Message
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp.settings import thinking_setting
from sluicegate.engines.llamacpp.template import render_chat, render_request, template_source

# As llama.cpp's corpus templates read it: an unset switch closes the block.
SWITCHED = (
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|><think>\n{% if not enable_thinking %}</think>{% endif %}{% endif %}"
)


def prompt(thinking: bool | None, effort: str | None = None) -> str:
    request = ChatRequest(model="m", messages=[Message("user", "hi")], reasoning_effort=effort)
    return render_request(SWITCHED, request, bos_token="", eos_token="", thinking=thinking)


def test_the_models_default_reaches_the_template() -> None:
    assert prompt(True).endswith("<think>\n")
    assert prompt(False).endswith("</think>")
    assert prompt(None).endswith("</think>")  # the template's own default: unset


def test_a_requests_effort_wins_over_the_default() -> None:
    assert prompt(True, "none").endswith("</think>")
    assert prompt(False, "high").endswith("<think>\n")


@pytest.mark.parametrize(("value", "meant"), [("on", True), ("off", False), ("auto", None)])
def test_thinking_values(value: str, meant: bool | None) -> None:
    assert thinking_setting(value) is meant


def test_thinking_refuses_other_values() -> None:
    with pytest.raises(ValueError, match="thinking"):
        thinking_setting("yes")


def test_builtin_template_names(tmp_path: Path) -> None:
    """llama.cpp's renderings (src/llama-chat.cpp) of its `command-r` and `llama3` templates."""
    messages = [Message("system", "You are a test."), Message("user", "Hi there")]
    command_r = render_chat(template_source("command-r", tmp_path), messages, [], bos_token="", eos_token="")
    assert command_r == (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    )
    llama3 = render_chat(template_source("llama3", tmp_path), messages, [], bos_token="", eos_token="")
    assert llama3.endswith("Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_a_file_of_that_name_wins_and_an_unknown_name_lists_the_built_ins(tmp_path: Path) -> None:
    (tmp_path / "chatml").write_text("{{ 'mine' }}")
    assert template_source("chatml", tmp_path) == "{{ 'mine' }}"
    with pytest.raises(ConfigError, match=r"built-in templates: .*command-r"):
        template_source("no-such-template", tmp_path)


def test_without_the_generation_prompt() -> None:
    """llama-server's `/apply-template` with `add_generation_prompt: false` after a user turn."""
    request = ChatRequest(model="m", messages=[Message("user", "hi")])
    assert (
        render_request(SWITCHED, request, bos_token="", eos_token="")
        == "<|user|>hi<|assistant|><think>\n</think>"
    )
    assert (
        render_request(SWITCHED, request, bos_token="", eos_token="", generation_prompt=False) == "<|user|>hi"
    )
