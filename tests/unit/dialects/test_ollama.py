"""The Ollama dialect without a server: request parsing, model names, and encoded chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    Usage,
    UsageReport,
)
from sluicegate.dialects.ollama.encoder import OllamaEncoder
from sluicegate.dialects.ollama.names import resolve_name, tagged
from sluicegate.dialects.ollama.request import parse_chat, parse_generate


def chat(**body: Any) -> Any:
    return parse_chat({"model": "m", **body})


@pytest.mark.parametrize(
    ("keep_alive", "seconds"),
    [(0, 0.0), ("0", 0.0), ("5m", 300.0), ("1h30m", 5400.0), (90, 90.0), ("250ms", 0.25), (-1, 2147483647.0)],
)
def test_keep_alive_is_seconds(keep_alive: Any, seconds: float) -> None:
    _, options = chat(keep_alive=keep_alive)
    assert options.keep_alive == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["soon", "5 minutes", True, [], "m5"])
def test_a_bad_keep_alive_is_a_400(bad: Any) -> None:
    with pytest.raises(SluicegateError) as raised:
        chat(keep_alive=bad)
    assert raised.value.info.status == 400 and raised.value.info.param == "keep_alive"


def test_streaming_is_the_default_and_options_map_to_sampling() -> None:
    request, options = chat(
        options={"temperature": 0.2, "num_predict": 7, "num_ctx": 2048, "stop": ["x"], "mirostat": 2},
        think="high",
        format="json",
    )
    assert options.stream is True
    assert request.sampling.temperature == 0.2 and request.sampling.max_tokens == 7
    assert request.sampling.stop == ["x"] and request.options.context_length == 2048
    assert request.reasoning_effort == "high" and request.response_format == {"type": "json_object"}
    assert chat(think=False)[0].reasoning_effort == "off"
    schema = {"type": "object"}
    assert chat(format=schema)[0].response_format["json_schema"]["schema"] == schema  # type: ignore[index]


def test_tool_results_answer_the_call_of_their_tool_name() -> None:
    request, _ = chat(
        messages=[
            {"role": "user", "content": "weather and time"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "get_time", "arguments": {}}},
                ],
            },
            {"role": "tool", "tool_name": "get_time", "content": "noon"},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
        ]
    )
    weather, time = request.messages[1].tool_calls
    assert json.loads(weather.arguments) == {"city": "Paris"}
    assert request.messages[2].tool_call_id == time.id and request.messages[2].name == "get_time"
    assert request.messages[3].tool_call_id == weather.id


def test_generate_is_a_templated_turn_of_system_and_prompt() -> None:
    request, options = parse_generate({"model": "m", "prompt": "Hi", "system": "Brief."})
    assert [(m.role, m.text) for m in request.messages] == [("system", "Brief."), ("user", "Hi")]
    assert options.endpoint == "generate" and not options.empty
    assert parse_generate({"model": "m"})[1].empty


def test_names_with_tags_resolve_to_served_ids() -> None:
    ids = ["chat", "acme/tiny-Q5_0", "acme/tiny-Q8_0"]
    paths = {
        "acme/tiny-Q5_0": "/m/acme/Tiny-GGUF/tiny-Q5_0.gguf",
        "acme/tiny-Q8_0": "/m/acme/Tiny-GGUF/tiny-Q8_0.gguf",
    }
    assert resolve_name("chat:latest", ids, paths.get) == "chat"
    assert resolve_name("chat", ids, paths.get) == "chat"
    assert resolve_name("chat:7b", ids, paths.get) is None
    assert resolve_name("hf.co/acme/Tiny-GGUF:Q8_0", ids, paths.get) == "acme/tiny-Q8_0"
    assert resolve_name("hf.co/acme/Other:Q8_0", ids, paths.get) is None
    assert tagged("chat") == "chat:latest" and tagged("a/b:2") == "a/b:2"


def encode(events: list[Event], *, generate: bool = False) -> list[dict[str, Any]]:
    accumulator = Accumulator()
    encoder = OllamaEncoder("m:latest", accumulator, generate=generate)
    lines = []
    for event in events:
        accumulator.feed(event)
        lines += [json.loads(frame.data) for frame in encoder.encode(event)]
    assert encoder.closing() == []
    return lines


def _item(kind: ItemKind, index: int = 0, **fields: Any) -> Item:
    return Item(index=index, kind=kind, id=f"i{index}", **fields)


def test_chunks_thinking_a_whole_tool_call_and_the_final_line() -> None:
    reasoning, message = _item(ItemKind.REASONING), _item(ItemKind.MESSAGE, 1)
    call = _item(ItemKind.TOOL_CALL, 2, call_id="call_1", name="f", tool_index=0)
    done_call = _item(
        ItemKind.TOOL_CALL, 2, call_id="call_1", name="f", tool_index=0, text='{"a": 1}', done=True
    )
    lines = encode(
        [
            ItemAdded(reasoning),
            ItemDelta(reasoning, "hmm"),
            ItemAdded(message),
            ItemDelta(message, "Hi"),
            ItemAdded(call),
            ItemDelta(call, '{"a": '),
            ItemDelta(call, "1}"),
            ItemDone(done_call),
            UsageReport(Usage(prompt_tokens=3, completion_tokens=4)),
            Finished(FinishReason.TOOL_CALLS),
        ]
    )
    assert [line["message"] for line in lines[:-1]] == [
        {"role": "assistant", "content": "", "thinking": "hmm"},
        {"role": "assistant", "content": "Hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}],
        },
    ]
    final = lines[-1]
    assert final["done"] is True and final["done_reason"] == "stop"
    assert final["prompt_eval_count"] == 3 and final["eval_count"] == 4
    assert final["model"] == "m:latest"


def test_generate_chunks_use_response_and_an_error_is_one_line() -> None:
    message = _item(ItemKind.MESSAGE)
    lines = encode(
        [ItemAdded(message), ItemDelta(message, "Hi"), Failed(ErrorInfo(ErrorKind.ENGINE, "boom"))],
        generate=True,
    )
    assert lines[0] == {
        "model": "m:latest",
        "created_at": lines[0]["created_at"],
        "response": "Hi",
        "done": False,
    }
    assert lines[1] == {"error": "boom"}
