"""LM Studio encoding of server-side tool calls: `tool_call.start/arguments/success/failure`
(and v0's `tool_call.result`), the `tool_call` and `invalid_tool_call` output items."""

from __future__ import annotations

from typing import Any

import pytest
from test_lmstudio_encoder import END, HUGGINGFACE, REF_TOOL_ARGUMENTS, REF_TOOL_START, run, words

from sluicegate.core.events import ItemKind, RawEvent, ToolCallDelta, ToolResult
from sluicegate.core.request import ProviderInfo

HF = ProviderInfo("ephemeral_mcp", "huggingface", "huggingface")
ARGS = '{"sort": "trendingScore", "limit": 1}'
OUTPUT = '[{"type":"text","text":"Showing first 1 models..."}]'
# The chat.end example of specs/lmstudio-streaming-events.md, output and all.
REF_OUTPUT = [
    {"type": "reasoning", "content": "Need to call function."},
    {
        "type": "tool_call",
        "tool": "model_search",
        "arguments": {"sort": "trendingScore", "limit": 1},
        "output": OUTPUT,
        "provider_info": {"type": "ephemeral_mcp", "server_label": "huggingface"},
    },
    {"type": "message", "content": "The current top-trending model is..."},
]
REF_TOOL_SUCCESS = {
    "type": "tool_call.success",
    "tool": "model_search",
    "arguments": {"sort": "trendingScore", "limit": 1},
    "output": OUTPUT,
    "provider_info": {"type": "ephemeral_mcp", "server_label": "huggingface"},
}


def providers(name: str) -> dict[str, Any] | None:
    return HUGGINGFACE if name == "model_search" else None


def server_call(name: str, arguments: str, call_id: str, index: int = 0) -> list[RawEvent]:
    return [ToolCallDelta(index, arguments, call_id, name, HF)]


def result(call_id: str, name: str, output: str, error: str | None = None) -> RawEvent:
    return ToolResult(call_id, name, output, HF, error)


def round_trip(output: str = OUTPUT, error: str | None = None) -> list[RawEvent]:
    return [
        *words("Need to call function.", ItemKind.REASONING),
        *server_call("model_search", ARGS, "c1"),
        result("c1", "model_search", output, error),
        *words("The current top-trending model is..."),
        *END,
    ]


async def test_a_server_call_streams_start_arguments_success_as_in_the_spec() -> None:
    run_ = await run(round_trip(), providers=providers)
    assert [n for n in run_.names if n.startswith(("tool_call.", "reasoning.", "message."))] == [
        "reasoning.start",
        *["reasoning.delta"] * 4,
        "reasoning.end",
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.success",
        "message.start",
        *["message.delta"] * 5,
        "message.end",
    ]
    assert run_.of("tool_call.start") == [REF_TOOL_START]
    assert run_.of("tool_call.arguments") == [REF_TOOL_ARGUMENTS]
    assert run_.of("tool_call.success") == [REF_TOOL_SUCCESS]
    assert list(run_.of("tool_call.success")[0]) == list(REF_TOOL_SUCCESS), "field order as documented"
    assert run_.result["output"] == REF_OUTPUT
    assert run_.encoder.body() == run_.result, "chat.end's result is the non-streaming body"


async def test_v0_reports_the_result_as_tool_call_result() -> None:
    run_ = await run(round_trip(), providers=providers, vocabulary="v0")
    assert [n for n in run_.names if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.result",
    ]
    assert run_.of("tool_call.result") == [{**REF_TOOL_SUCCESS, "type": "tool_call.result"}]
    assert run_.result["output"] == REF_OUTPUT


@pytest.mark.parametrize("vocabulary", ["current", "v0"])
async def test_a_tool_error_is_a_failure_after_the_arguments(vocabulary: Any) -> None:
    run_ = await run(
        round_trip("Error: timed out after 60s", "timed out after 60s"),
        providers=providers,
        vocabulary=vocabulary,
    )
    last = "tool_call.failure" if vocabulary == "current" else "tool_call.result"
    assert [n for n in run_.names if n.startswith("tool_call.")] == [
        "tool_call.start",
        "tool_call.arguments",
        last,
    ]
    invalid = {
        "type": "invalid_tool_call",
        "reason": "timed out after 60s",
        "metadata": {
            "type": "invalid_arguments",
            "tool_name": "model_search",
            "arguments": {"sort": "trendingScore", "limit": 1},
            "provider_info": HUGGINGFACE,
        },
    }
    if vocabulary == "current":
        assert run_.of(last) == [{"type": last, "reason": invalid["reason"], "metadata": invalid["metadata"]}]
    else:
        assert run_.of(last)[0]["output"] == "Error: timed out after 60s"
    assert run_.result["output"][1] == invalid
    assert run_.result["output"][2] == {"type": "message", "content": "The current top-trending model is..."}


async def test_an_unknown_tool_is_reported_once_even_with_the_loops_error_result() -> None:
    raw = [
        *server_call("open_browser", "{}", "c1"),
        result("c1", "open_browser", "Error: no such tool", "Cannot find tool with name open_browser."),
        *words("Sorry."),
        *END,
    ]
    run_ = await run(raw, providers=providers)
    assert [n for n in run_.names if n.startswith("tool_call.")] == ["tool_call.failure"]
    assert run_.result["output"] == [
        {
            "type": "invalid_tool_call",
            "reason": "Cannot find tool with name open_browser.",
            "metadata": {"type": "invalid_name", "tool_name": "open_browser"},
        },
        {"type": "message", "content": "Sorry."},
    ]


async def test_unparseable_arguments_are_reported_once() -> None:
    raw = [
        *server_call("model_search", '{"sort": ', "c1"),
        result("c1", "model_search", "Error: bad JSON", "invalid JSON"),
        *END,
    ]
    run_ = await run(raw, providers=providers)
    assert [n for n in run_.names if n.startswith("tool_call.")] == ["tool_call.start", "tool_call.failure"]
    assert run_.of("tool_call.failure")[0]["metadata"]["type"] == "invalid_arguments"
    assert [item["type"] for item in run_.result["output"]] == ["invalid_tool_call"]


async def test_parallel_calls_pair_each_result_with_its_call() -> None:
    raw = [
        *server_call("model_search", '{"q": 1}', "c1", 0),
        *server_call("model_search", '{"q": 2}', "c2", 1),
        result("c1", "model_search", "one"),
        result("c2", "model_search", "two"),
        *END,
    ]
    run_ = await run(raw, providers=providers)
    assert [(e["arguments"], e["output"]) for e in run_.of("tool_call.success")] == [
        ({"q": 1}, "one"),
        ({"q": 2}, "two"),
    ]
    assert [(i["arguments"], i["output"]) for i in run_.result["output"]] == [
        ({"q": 1}, "one"),
        ({"q": 2}, "two"),
    ]
