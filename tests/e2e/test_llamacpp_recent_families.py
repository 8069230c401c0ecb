"""Forced tool calls in the newer families' markup (those after the first nineteen in
parsing/registry.py), end to end with the openai and anthropic SDKs: the tiny random-weight GGUF
served with each family's template, `tool_choice` required (openai) or `any` (anthropic) under
the family's call grammar; the call arrives parsed in the client's shape, its arguments valid
against the schema, streamed in more than one piece where the family writes arguments as they
go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2e_support import Server
from forced_calls import anthropic_forced_call, openai_forced_call

from llama_cpp_support import templates_dir

pytestmark = pytest.mark.e2e

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next days?"}]

# Llama 4's template is not in llama.cpp's corpus: its turn tokens, enough to be recognised.
LLAMA4 = (
    "{{- bos_token }}{%- for m in messages %}{{- '<|header_start|>' + m['role'] + '<|header_end|>\\n\\n' }}"
    "{{- m['content'] if m['content'] is string else '' }}{{- '<|eot|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}{%- endif %}"
)

# family -> (template, whether its arguments stream in pieces)
FAMILIES = {
    "deepseek_v3_2": ("deepseek-ai-DeepSeek-V3.2.jinja", True),
    "deepseek_v4": ("deepseek-ai-DeepSeek-V4.jinja", True),
    "kimi_k3": ("Kimi-K3.jinja", True),
    "minimax_m3": ("MiniMax-M3.jinja", True),
    "minicpm5": ("openbmb-MiniCPM5-1B.jinja", True),
    "gigachat3": ("GigaChat3-10B-A1.8B.jinja", True),
    "gigachat3_1": ("GigaChat3.1-10B-A1.8B.jinja", True),
    "apriel": ("unsloth-Apriel-1.5.jinja", True),
    "command_r_plus": ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", True),
    "firefunction_v2": ("fireworks-ai-llama-3-firefunction-v2.jinja", True),
    "llama4_pythonic": ("", True),
    "hy3": ("tencent-Hy3.jinja", True),
    "muse_glimmer": ("muse-glimmer.jinja", True),
    "solar_open": ("upstage-Solar-Open-100B.jinja", True),
    "minimax_m1": ("MiniMax-M1.jinja", True),
}


@pytest.fixture(scope="module")
def recent_server(start_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    corpus = templates_dir()
    if corpus is None:
        pytest.skip("llama.cpp's template corpus is not available")
    tmp = tmp_path_factory.mktemp("gguf")
    gguf = str(make_demo_gguf(tmp / "tiny.gguf", ends_replies=False))
    (tmp / "llama4.jinja").write_text(LLAMA4, encoding="utf-8")
    models = [
        {
            "id": family,
            "engine": "llamacpp",
            "path": gguf,
            "context_length": 16384,
            "chat_template": str(Path(corpus) / template) if template else str(tmp / "llama4.jinja"),
            "reasoning": "none",  # the grammar applies from the first token
        }
        for family, (template, _) in FAMILIES.items()
    ]
    server: Server = start_server({"jit_auto_evict": True}, models=models)  # one model loaded at a time
    return server


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_forced_call_through_both_sdks(recent_server: Server, family: str) -> None:
    streams = FAMILIES[family][1]
    pieces = openai_forced_call(recent_server, family, ASK, WEATHER)
    assert pieces > 1 if streams else pieces >= 1
    json_pieces = anthropic_forced_call(recent_server, family, ASK, WEATHER)
    if streams:
        assert json_pieces > 1
