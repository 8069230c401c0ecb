"""Forced tool calls in each family's own markup, end to end with the openai SDK: the tiny
random-weight GGUF served with a template of llama.cpp's corpus, `tool_choice: "required"`
under the family's call grammar; the call arrives parsed, its arguments valid against the
schema, streamed in more than one piece where the family writes arguments as they go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from e2e_support import Server
from forced_calls import anthropic_forced_call, openai_forced_call
from pydantic import BaseModel, Field

from llama_cpp_support import templates_dir

pytestmark = pytest.mark.e2e

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "What is the weather in Paris today?"}]

# family -> (template, whether its arguments stream in pieces)
FAMILIES = {
    "harmony": ("openai-gpt-oss-120b.jinja", True),
    "mistral": ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", True),
    "hermes": ("Qwen-Qwen2.5-7B-Instruct.jinja", True),
    "qwen3_coder": ("Qwen3-Coder.jinja", True),
    "glm": ("GLM-4.6.jinja", True),
    "minimax_m2": ("MiniMax-M2.jinja", True),
    "seed_oss": ("ByteDance-Seed-OSS.jinja", True),
    "deepseek_v3_1": ("deepseek-ai-DeepSeek-V3.1.jinja", True),
    "deepseek_r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", True),
    "kimi_k2": ("moonshotai-Kimi-K2.jinja", True),
    "gemma4": ("google-gemma-4-31B-it.jinja", True),
    "lfm2": ("LFM2-8B-A1B.jinja", True),
    "nemotron": ("NVIDIA-Nemotron-Nano-v2.jinja", True),
    "command_r7b": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", True),
    "granite": ("ibm-granite-granite-3.3-2B-Instruct.jinja", True),
    "apertus": ("Apertus-8B-Instruct.jinja", True),
    "functionary_v3_1": ("meetkai-functionary-medium-v3.1.jinja", True),
    "functionary_v3_2": ("meetkai-functionary-medium-v3.2.jinja", True),
    "llama3_json": ("meta-llama-Llama-3.1-8B-Instruct.jinja", True),
}
# Models whose reasoning is detected from the template (the grammar lets them reason first).
REASONING = {"harmony-thinks": "openai-gpt-oss-120b.jinja", "qwen3-thinks": "Qwen-Qwen3-0.6B.jinja"}


@pytest.fixture(scope="module")
def family_server(start_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    corpus = templates_dir()
    if corpus is None:
        pytest.skip("llama.cpp's template corpus is not available")
    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    models = [
        {
            "id": family,
            "engine": "llamacpp",
            "path": gguf,
            "context_length": 16384,
            "chat_template": str(Path(corpus) / template),
            "reasoning": "none",  # the grammar applies from the first token
        }
        for family, (template, _) in FAMILIES.items()
    ] + [
        {
            "id": model,
            "engine": "llamacpp",
            "path": gguf,
            "context_length": 16384,
            "chat_template": str(Path(corpus) / template),
        }
        for model, template in REASONING.items()
    ]
    # One family's model loaded at a time: twenty 16k contexts held for the whole session were ~5 GB.
    server: Server = start_server({"jit_auto_evict": True}, models=models)
    return server


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_forced_call_in_the_family_markup(family_server: Server, family: str) -> None:
    pieces = openai_forced_call(family_server, family, ASK, WEATHER)
    if FAMILIES[family][1]:
        assert pieces > 1


@pytest.mark.parametrize("family", ["harmony", "qwen3_coder", "glm", "kimi_k2", "minimax_m2", "gemma4"])
def test_a_forced_call_through_the_anthropic_sdk(family_server: Server, family: str) -> None:
    pieces = anthropic_forced_call(family_server, family, ASK, WEATHER)
    if FAMILIES[family][1]:
        assert pieces > 1


class Weather(BaseModel):
    city: str = Field(max_length=12)
    windy: bool


def test_json_output_in_harmony_final_channel(family_server: Server) -> None:
    """`response_format` on gpt-oss: the grammar writes the final channel's header, and the
    parser hands back the JSON as the content."""
    with openai.OpenAI(base_url=family_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        completion = sdk.chat.completions.parse(
            model="harmony", messages=ASK, response_format=Weather, max_tokens=200, seed=1
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Weather)
    assert "<|" not in (choice.message.content or "")


def test_harmony_may_reason_before_its_json_output(family_server: Server) -> None:
    """Where the model reasons, the grammar lets it use the analysis channel first: that text
    is reasoning, never content. (The random model does not end its analysis: the JSON after it
    is the unit tests' — test_call_grammar.py.)"""
    with openai.OpenAI(base_url=family_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        completion = sdk.chat.completions.create(
            model="harmony-thinks",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "w", "schema": Weather.model_json_schema()},
            },
            max_tokens=60,
            seed=0,
        )
    message = completion.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content")
    assert not message.content


def test_json_output_of_a_think_family(family_server: Server) -> None:
    """Qwen3 (`<think>` detected): the grammar waits for a reasoning block that opens with the
    first token, else applies from it; the JSON is the content, through the SDK's parse()."""
    with openai.OpenAI(base_url=family_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        completion = sdk.chat.completions.parse(
            model="qwen3-thinks", messages=ASK, response_format=Weather, max_tokens=200, seed=1
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Weather)
    assert "<think>" not in (choice.message.content or "")
