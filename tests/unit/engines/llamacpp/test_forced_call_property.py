"""A forced call ends in a call, whatever the weights (issue 47): for every family, its chat
template from llama.cpp's corpus on the random-weight demo GGUF, under 20 seeds, two tools
offered, `tool_choice: "required"` (even seeds) or the first tool by name (odd seeds), and each
reply holds one call of an allowed tool with arguments valid against its schema, and ends
before `max_tokens`. The demo's weights are random (end of turn is likely,
reasoning tags are not): only the grammar can make a call of that.

One engine (one model load) per template; the seeds run one after another, so every request
after the first reuses the cached prompt.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine_events import engine_events
from llama_cpp_support import fold, templates_dir
from sluicegate.core.events import Finished, RawEvent
from sluicegate.core.request import ChatRequest, Message, SamplingParams, ToolSpec
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.parsing import FAMILIES, Family

SEEDS = range(20)
MAX_TOKENS = 512
WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["utc", "cet"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = {"get_weather": WEATHER, "get_time": TIME}
# Llama 4's template is not in the corpus: the part its fingerprint and generation prompt need.
LLAMA4 = (
    "{%- for m in messages %}{{- '<|header_start|>' + m.role + '<|header_end|>\\n\\n' + m.content"
    " + '<|eot|>' }}{%- endfor %}{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}"
)


def _template(family: Family, corpus: Path, scratch: Path) -> Path:
    found = [corpus / t for t in family.templates if (corpus / t).is_file()]
    if found:
        return found[0]
    path = scratch / f"{family.name}.jinja"
    path.write_text(LLAMA4)
    return path


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("forced") / "tiny.gguf")


async def _reply(engine: LlamaCppEngine, seed: int) -> tuple[list[RawEvent], Any]:
    request = ChatRequest(
        model="f",
        messages=[Message("user", "What is the weather in Paris today?")],
        tools=[ToolSpec(name, parameters=schema) for name, schema in TOOLS.items()],
        tool_choice="required" if seed % 2 == 0 else "get_weather",
        sampling=SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=seed),
    )
    engine.check(request)
    events = [event async for event in engine_events(engine, request)]
    finished = next((e.reason for e in events if isinstance(e, Finished)), None)
    return events, finished


async def _replies(table: dict[str, Any]) -> list[tuple[int, list[RawEvent], Any]]:
    engine = LlamaCppEngine.from_config(table, Path("."))
    await engine.load(lambda _: None)
    try:
        return [(seed, *await _reply(engine, seed)) for seed in SEEDS]
    finally:
        await engine.aclose()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_forced_call_ends_in_a_valid_call(family: Family, gguf: Path, tmp_path: Path) -> None:
    corpus = templates_dir()
    if corpus is None:
        pytest.skip("llama.cpp's template corpus is not available")
    table = {
        "id": "f",
        "engine": "llamacpp",
        "path": str(gguf),
        "chat_template": str(_template(family, corpus, tmp_path)),
        "context_length": 8192,  # Command R7B's template renders ~4,400 tokens of tools
    }
    failures = []
    for seed, events, finished in asyncio.run(_replies(table)):
        message = fold(events)
        calls = message["tool_calls"]
        problem = None
        allowed = TOOLS if seed % 2 == 0 else {"get_weather": WEATHER}
        if len(calls) != 1 or calls[0]["name"] not in allowed:
            problem = f"no call of {sorted(allowed)} ({finished}): {message}"
        else:
            try:
                jsonschema.validate(json.loads(calls[0]["arguments"]), allowed[calls[0]["name"]])
            except (ValueError, jsonschema.ValidationError) as exc:
                problem = f"invalid arguments {calls[0]['arguments']!r}: {exc}"
        if problem is None and getattr(finished, "value", finished) == "length":
            problem = "cut by max_tokens"
        if problem:
            failures.append(f"seed {seed}: {problem}")
    assert not failures, f"{family.name}: " + "\n".join(failures[:3]) + f"\n({len(failures)} of {len(SEEDS)})"
