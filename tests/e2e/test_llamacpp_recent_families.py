"""Forced tool calls in the newer families' markup (parsing/families/recent.py), end to end with
the openai and anthropic SDKs: the tiny random-weight GGUF served with each family's template,
`tool_choice` required (openai) or `any` (anthropic) under the family's call grammar; the call
arrives parsed in the client's shape, its arguments valid against the schema, streamed in more
than one piece where the family writes arguments as they go.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from e2e_support import Server

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
    from sluicegate.engines.llamacpp.demo import make_demo_gguf

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
    import anthropic

    tools: list[Any] = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    with openai.OpenAI(base_url=recent_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        pieces = 0
        with sdk.chat.completions.stream(
            model=family, messages=ASK, tools=tools, tool_choice="required", max_tokens=300, seed=3
        ) as events:
            for event in events:
                if event.type == "tool_calls.function.arguments.delta":
                    pieces += 1
            completion = events.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER)
    streams = FAMILIES[family][1]
    assert pieces > 1 if streams else pieces >= 1

    with anthropic.Anthropic(
        base_url=recent_server.base_url, api_key="unused", max_retries=0, timeout=120.0
    ) as client:
        json_pieces = 0
        with client.messages.stream(
            model=family,
            messages=ASK,  # type: ignore[arg-type]
            tools=[{"name": "get_weather", "input_schema": WEATHER}],
            tool_choice={"type": "any"},
            max_tokens=300,
        ) as stream:
            for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    json_pieces += 1
            message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER)
    if streams:
        assert json_pieces > 1
