"""Chat Completions with server-side tools: the client sees every round's text and only its own
tool calls; server calls, results and listings stay out of the wire, streaming or not."""

from __future__ import annotations

import json

from test_chat_encoder import chunks, deltas, encode_all, sdk_final, weather_tool

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import Event
from sluicegate.core.request import ChatRequest, Message, ToolSpec
from sluicegate.core.segment import segment
from sluicegate.dialects.chat_completions.encoder import completion_body
from sluicegate.engines.scripted import ScriptedEngine, parse_script
from sluicegate.tools.loop import run_tool_loop
from tool_fakes import FakeToolSet, echo

CLIENT_TOOL = ToolSpec("get_weather", parameters=weather_tool()["function"]["parameters"])
SCRIPT = {
    "replies": [
        {"when": {"last_role": "tool"}, "content": "Paris is sunny.", "tool_calls": []},
        {
            "content": "Checking.",
            "tool_calls": [
                {"name": "lookup", "arguments": {"q": "Paris"}},
                {"name": "get_weather", "arguments": {"location": "Paris"}},
            ],
        },
    ]
}


async def looped(script: dict[str, object], tools: list[ToolSpec]) -> list[Event]:
    engine = ScriptedEngine("m", parse_script(script, "t"))

    async def open_round(request: ChatRequest) -> object:
        return engine.generate(request)

    request = ChatRequest(model="m", messages=[Message("user", "weather?")], tools=tools)
    loop = run_tool_loop(request, FakeToolSet({"lookup": echo}), open_round, max_rounds=5)  # type: ignore[arg-type]
    return [event async for event in segment(loop)]


async def test_a_mixed_round_shows_the_client_only_its_own_call() -> None:
    events = await looped(SCRIPT, [CLIENT_TOOL])
    stream = encode_all(events, include_usage=True)
    calls = [d["tool_calls"] for d in deltas(stream) if "tool_calls" in d]
    assert calls[0] == [
        {
            "index": 0,
            "id": calls[0][0]["id"],
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
    ]
    assert all(c[0]["index"] == 0 for c in calls)
    assert chunks(stream)[-1]["choices"][0]["finish_reason"] == "tool_calls"
    final = sdk_final(stream, [weather_tool()])
    message = final.choices[0].message
    assert message.content == "Checking."
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"location": "Paris"}
    accumulator = Accumulator()
    for event in events:
        accumulator.feed(event)
    body = completion_body(accumulator.result, completion_id="c", created=0, model="m", logprobs=False)
    assert body["choices"][0]["message"]["tool_calls"] == [
        {
            "id": message.tool_calls[0].id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": message.tool_calls[0].function.arguments},
        }
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


async def test_server_only_rounds_stream_their_text_and_end_with_stop() -> None:
    script = {
        "replies": [
            SCRIPT["replies"][0],  # type: ignore[index]
            {"content": "Checking.", "tool_calls": [{"name": "lookup", "arguments": {"q": "Paris"}}]},
        ]
    }
    events = await looped(script, [])
    stream = encode_all(events)
    assert "tool_calls" not in stream.decode()
    assert [d.get("role") for d in deltas(stream)].count("assistant") == 1
    final = sdk_final(stream)
    assert final.choices[0].message.content == "Checking.Paris is sunny."
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls


async def test_a_round_starting_with_a_server_call_still_opens_with_the_role() -> None:
    script = {
        "replies": [
            SCRIPT["replies"][0],  # type: ignore[index]
            {"tool_calls": [{"name": "lookup", "arguments": {}}]},
        ]
    }
    stream = encode_all(await looped(script, []))
    first = deltas(stream)[0]
    assert first == {"role": "assistant", "content": ""}
    assert sdk_final(stream).choices[0].message.content == "Paris is sunny."
